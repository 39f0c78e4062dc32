"""What an evaluation reads: corpus snapshots, golden sets, suites, traces, the field's formats."""
