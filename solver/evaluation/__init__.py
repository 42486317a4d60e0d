"""One design, one path: its physics (:mod:`.evaluate`, :mod:`.pools`), its price (:mod:`.pricing`) and the odds of
meeting its targets (:mod:`.uncertainty`).

The layer between :mod:`clusterplan.physics` and :mod:`clusterplan.candidates`: the planner's candidate rows,
``clusterplan estimate``, the checker's repricing and the review report all evaluate and price a design through these
functions, so the figures they print agree.
"""
