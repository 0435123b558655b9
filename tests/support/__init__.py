"""Helpers shared by the test layers (unit, integration, faults): import from here only."""
