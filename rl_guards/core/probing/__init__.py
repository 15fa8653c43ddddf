"""The reward probes (pure): controlled variants of a real row, one procedure that scores them with any framework's
reward functions, and the rules and quorum that turn the scores into verdicts.

- :mod:`~rl_guards.core.probing.forms`: the final answer a reference states; the forms answers are written in.
- :mod:`~rl_guards.core.probing.variants`: the texts, each changing one thing against its base.
- :mod:`~rl_guards.core.probing.rules`: what one function's scores (and the weighted total's) say.
- :mod:`~rl_guards.core.probing.procedure`: the one procedure, run over rows in lockstep with a driver's scorer.
- :mod:`~rl_guards.core.probing.tally`: per-row results to bits (across ranks) and to verdicts (the quorum).
"""
