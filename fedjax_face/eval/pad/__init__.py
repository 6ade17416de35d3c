"""Face presentation-attack detection: metrics and evaluators."""
