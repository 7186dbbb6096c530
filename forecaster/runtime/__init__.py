"""Run-time predictor of pending pods (issue 28)."""
