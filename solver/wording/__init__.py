"""Words: the one home of number formatting (:mod:`.fmt`), of the sentence each reason code reads as
(:mod:`.reasons`) and of the odds of meeting a target in words (:mod:`.odds`).

Beneath every layer that builds a sentence (evaluation, the planner's families, explain, the command services and
``render/``'s edge writers); it imports only the physics' reason codes and the plan's schema.
"""
