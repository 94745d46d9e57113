"""PopXL transforms (autodiff and the numerically transparent ones) will live here."""
