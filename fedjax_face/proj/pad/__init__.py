"""The FedGPAD paper (face presentation-attack detection): its setting and, to come, its tables."""
