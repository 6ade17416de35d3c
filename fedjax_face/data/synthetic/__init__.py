"""The embedded benchmarks, rendered from a seed with nothing downloaded: parametric faces
(`identities`, `nuisance`, `render`) assembled into a training set with look-alike families and
six pair sets (`benchmark`, `pairs`, on the rng streams of `streams`), a 1:N gallery of held-out
identities (`identification_set`), and the five-domain face anti-spoofing benchmark
(`pad_benchmark`)."""
