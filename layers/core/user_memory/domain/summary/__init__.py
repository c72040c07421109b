"""The nightly summary: the pipeline, the model's edits, the fact floor, the rule-based
summarizer and the requests that ask a summary to remove something."""
