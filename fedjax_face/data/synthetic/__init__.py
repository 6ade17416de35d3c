"""The embedded benchmarks, rendered from a seed with nothing downloaded: parametric faces with
look-alike families and six pair sets (`faces`), a 1:N gallery of held-out identities
(`identification_set`), and the five-domain face anti-spoofing benchmark (`pad_benchmark`)."""
