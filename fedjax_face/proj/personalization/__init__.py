"""The personalization baselines against FedFR (docs/personalization.md): their table."""
