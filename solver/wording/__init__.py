"""Words: the one home of number formatting (:mod:`.fmt`), of the sentence each reason code reads as
(:mod:`.reasons`), of the odds of meeting a target in words (:mod:`.odds`) and of names as every output shows them
(:mod:`.safe`: control, bidirectional and zero-width characters escaped; shell comments; file-name slugs).

Beneath every layer that builds a sentence (evaluation, the planner's families, explain, the command services and
``render/``'s edge writers); it imports only the physics' reason codes and the plan's schema.
"""
