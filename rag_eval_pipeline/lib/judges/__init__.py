"""Judges: the protocol, the deterministic and LLM judges, sampling, judging, calibration."""
