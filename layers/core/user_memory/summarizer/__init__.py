"""Summarizers turn (current document, new activity) into the next document."""

from user_memory.summarizer.base import Summarizer, SummaryResult
from user_memory.summarizer.rules import RuleBasedSummarizer

__all__ = ["RuleBasedSummarizer", "Summarizer", "SummaryResult"]
