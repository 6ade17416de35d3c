"""A real federation: the project's methods over Flower, one process per data holder, each round
the simulator's (docs/federation.md). The bridge's logic has no Flower in it; apps.py alone
imports `flwr` (the `flower` extra of pyproject.toml).

  roster.py    who is in the federation: each holder's description, the skeleton the method is
               built on, a holder's own data at its place
  protocol.py  what both sides agree on: the method, the round keys, the messages' templates,
               what the bridge refuses
  wire.py      pytrees as named arrays (messages, a holder's private state files)
  holder.py    a data holder: its own folder, the method's client_update, its private state
  server.py    the server: sampling, broadcast, the engine's server step; `train_round` for
               run/loop.run_rounds
  apps.py      Flower's ClientApp and ServerApp over the two
  export.py    a config's clients written as one folder per holder
"""
