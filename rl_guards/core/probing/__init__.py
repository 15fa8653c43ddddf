"""The reward probes (pure): controlled variants of a real row, one procedure that scores them with any framework's
reward functions, and the rules and quorum that turn the scores into verdicts.

- :mod:`~rl_guards.core.probing.forms`: the final answer a reference states; the forms answers are written in.
- :mod:`~rl_guards.core.probing.variants`: the texts, each changing one thing against its base.
- :mod:`~rl_guards.core.probing.rules`: what one function's scores (and the weighted total's) say.
- :mod:`~rl_guards.core.probing.calls`: what a row's procedure asks a scorer for; each function's state.
- :mod:`~rl_guards.core.probing.procedure`: the one procedure on one row.
- :mod:`~rl_guards.core.probing.narrowing`: a cut narrowed to a few characters, and reproduced.
- :mod:`~rl_guards.core.probing.totals`: the weighted total's verdicts.
- :mod:`~rl_guards.core.probing.runner`: every row's procedure in lockstep with a driver's scorer.
- :mod:`~rl_guards.core.probing.tally`: per-row results to bits (across ranks) and to verdicts (the quorum).
"""
