"""What people read: the run summary, the HTML report, the charts."""
