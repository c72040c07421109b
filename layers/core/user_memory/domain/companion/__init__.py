"""The companion layer: its schema, elements (goals, to-dos, events, ratings), the search index's
items, recurrences and the one check of every time taken."""
