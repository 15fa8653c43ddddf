"""rl_guards: guards for TRL GRPO runs."""
