"""Running untrusted code: backends, limits and the in-sandbox harness."""
