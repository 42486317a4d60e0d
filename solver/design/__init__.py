"""One design, one path: its physics (:mod:`.evaluate`) and its price (:mod:`.pricing`).

The planner's candidate rows, ``clusterplan estimate``, the checker's repricing and the review report
all evaluate and price a design through these functions, so the figures they print agree.
"""
