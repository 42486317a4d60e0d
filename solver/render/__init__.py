"""Renderers of a :class:`clusterplan.plan.Plan`: a rich table, Markdown, JSON. Formatting only, no logic."""
