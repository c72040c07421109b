"""The 30-day simulation's pieces: the activity generator (with each user's expected facts), the
scripted OpenAI-compatible model, the run over the real worker handler, and the fact accounting.

Entry point: bench/sim_30_days.py.
"""
