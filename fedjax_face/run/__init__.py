"""The run: everything between a config and its results.

  setup.py        validate, read the data, the warm start, build model, algorithm and engine
  resume.py       which config may open a workdir, stopped runs, `init_from`, config.json
  noise.py        the noise a DP run trains at across its starts (`plan_noise`)
  schedule.py     which rounds are logged, checkpointed, evaluated; learning-rate decay rounds
  loop.py         the round loop: a training step, then each hook (no engine in it)
  simulation.py   the simulated federation's training step (core/engine.py's RoundEngine)
  replay.py       round r's client updates again, from the checkpoint of round r-1 (evaluators)
  hooks/          checkpointing, preemption, divergence guard, logging, mid-run evaluation
  results.py      results.json: the run name, the blocks in effect, the result files

experiment.py drives them: setup, restore, the loop with its hooks, the final evaluation, results.
"""
