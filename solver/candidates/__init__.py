"""Candidates: every replica shape and training layout on every GPU type, with its physics, cost and why any were ruled out (prepared before the CP-SAT model is built)."""
