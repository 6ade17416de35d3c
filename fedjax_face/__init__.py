"""fedjax_face: federated face recognition and anti-spoofing methods in JAX (map: WORKSPACE.md)."""
