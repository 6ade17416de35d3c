"""Evaluators chosen by `config.evals`: each section there names a type below and holds its
settings; every one present runs after training (and every `eval.every_rounds` rounds).

An evaluator module defines, for its type:

  config_<type>() -> ConfigDict                   its section's fields at their defaults
  check_<type>(config, section) -> None          ValueError naming a wrong field of the section
  make_<type>(config, section, setup) -> Evaluator | None   None: nothing to evaluate here
                                                   (e.g. 1:N on a source with no gallery)

An evaluator loads what it evaluates on, through the data source's views (`data/sources/`: pair
sets, a 1:N gallery, anti-spoofing videos); its check names the view it needs. It is built once
per run (its data prepared, its functions jitted once) and called with an `EvalInputs` at every
evaluation; it returns an `EvalOutput`: its results, scalars, figures, arrays and its section of
report.md, and grids of images (PNG). `evaluate` runs them all; `io/artifacts.py` writes the
figures, arrays and grids,
`io/report.py` the results and the sections as given.

A task's configs start with the sections of `TASK_EVALUATORS[task]` (`config_lib.base_config`);
a config adds or deletes others. Adding a task's evaluator (face anti-spoofing: HTER / EER / AUC)
is a module under `eval/<task>/` and a line in each table below.
"""

import importlib
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

EVALUATORS = {   # type -> module defining check_<type> and make_<type> (a dotted path, or a module)
    'verification': 'fedjax_face.eval.recognition.evaluators',
    'identification': 'fedjax_face.eval.recognition.evaluators',
    'personalized': 'fedjax_face.eval.recognition.evaluators',
    'ijb': 'fedjax_face.eval.recognition.ijb',
    'rfw': 'fedjax_face.eval.recognition.rfw',
    'tinyface': 'fedjax_face.eval.recognition.tinyface',
    'diagnostics': 'fedjax_face.eval.diagnostics',
    'pad': 'fedjax_face.eval.pad.evaluators',
    'leakage': 'fedjax_face.eval.privacy.leakage',
    'membership': 'fedjax_face.eval.privacy.membership',
    'inversion': 'fedjax_face.eval.privacy.evaluators',
}
# The evaluators a task's configs carry from the start (`add_sections`). The attacks' sections
# are off at their defaults (leakage.round=0, membership.samples=0, inversion.targets=0), so they
# change no run, and `python -m fedjax_face.evaluate --config.evals.<attack>.<field>=` switches
# one on for any finished workdir. PAD configs carry 'inversion' too: its check refuses a PAD
# method in one line when it is switched on.
TASK_EVALUATORS = {
    'recognition': ('verification', 'identification', 'diagnostics', 'ijb', 'leakage',
                    'membership', 'inversion'),
    'anti_spoofing': ('pad', 'membership', 'inversion'),
}


class EvalSetup(NamedTuple):
  """What evaluators may prepare from once per run."""
  config: Any
  benchmark: Any        # data.types.SourceData (its task's subclass): what the source loaded
  fed_view: Any         # data.federated.FederatedData of the clients (identity / class tables)


class EvalInputs(NamedTuple):
  """What one evaluation sees: the model's prediction its task makes (`predictions`), and what
  the method and the run hold."""
  embed: Callable[[np.ndarray], jax.Array] | None   # a face recognition model's: uint8 images
                                              # [B, H, W, C] -> embeddings [B, d]; else None
  class_embeddings: Any                       # [num_identities, d], or None (method keeps none)
  personal_embed: Callable[[int], Callable] | None = None   # client -> its model's embed, or
                                              # None: every client is evaluated with `embed`
  state: Any = None                           # the round state evaluated (core.algorithm)
  replay: Callable[[int], Any] | None = None  # round r (1-based) -> each real client's update
                                              # of that round again, in cohort order, from the
                                              # checkpoint of round r-1 (run/replay.py); the final
                                              # evaluation of process 0 only, else None
  live_logits: Callable[[np.ndarray], jax.Array] | None = None   # an anti-spoofing detector's:
                                              # its input images [B, H, W, C] -> the logit of
                                              # live [B]; else None
  personal_live_logits: Callable[[int], Callable] | None = None   # data center -> its
                                              # personal model's live logits, or None: the
                                              # method has no personal model


class EvalOutput(NamedTuple):
  results: dict                                  # results.json[<type>]
  scalars: dict[str, float]                      # TensorBoard, under eval/<type>/...
  figures: dict[str, Any]                        # file name -> matplotlib Figure
  arrays: dict[str, dict[str, np.ndarray]]       # file name (.npz) -> arrays
  markdown: tuple[str, ...] | list[str] = ()     # its section of report.md, as lines
  images: dict[str, dict] | None = None          # file name (.png) -> io.artifacts
                                                 # .write_image_grid's images, rows, cols


class Evaluator(NamedTuple):
  type: str
  evaluate: Callable[[EvalInputs], 'EvalOutput | None']


def _module(kind: str):
  if kind not in EVALUATORS:
    raise ValueError(f'config.evals.{kind} is not an evaluator type; expected one of '
                     f'{sorted(EVALUATORS)}.')
  module = EVALUATORS[kind]
  return importlib.import_module(module) if isinstance(module, str) else module


def config_section(kind: str):
  """`config.evals.<kind>` at its defaults."""
  return getattr(_module(kind), f'config_{kind}')()


def add_sections(config, task: str) -> None:
  """Adds `config.evals.<kind>` for every evaluator of `task`, at its defaults."""
  for kind in TASK_EVALUATORS[task]:
    config.evals[kind] = config_section(kind)


def evaluator_types(config) -> list[str]:
  """The types of `config.evals`, in `EVALUATORS` order (a ConfigDict iterates its keys sorted,
  which would order outputs, figures and report sections by name)."""
  for kind in config.evals:
    _module(kind)   # unknown types fail here, naming the choices
  return [kind for kind in EVALUATORS if kind in config.evals]


def check_config(config) -> None:
  """Each `config.evals` section checked by its evaluator."""
  for kind, section in config.evals.items():
    getattr(_module(kind), f'check_{kind}')(config, section)


def make_evaluators(config, setup: EvalSetup) -> list[Evaluator]:
  """The run's evaluators, in `evaluator_types` order (those with nothing to evaluate left out)."""
  evaluators = []
  for kind in evaluator_types(config):
    evaluator = getattr(_module(kind), f'make_{kind}')(config, config.evals[kind], setup)
    if evaluator is not None:
      evaluators.append(evaluator)
  return evaluators


def make_embed(model) -> Callable:
  """`embed(variables) -> images -> embeddings`, jitted once for the whole run."""
  apply = jax.jit(lambda variables, x: model.apply(variables, x, train=False))
  return lambda variables: (lambda images: apply(variables, images))


def _live_logits(model) -> Callable:
  """`(variables) -> images -> live logits` of an anti-spoofing detector (whose output is a
  dict of its heads), jitted once for the whole run."""
  apply = jax.jit(lambda variables, x: model.apply(variables, x, train=False)['logit'])
  return lambda variables: (lambda images: apply(variables, images))


# The prediction each task's evaluators take from the model: EvalInputs' field, and its maker.
PREDICTIONS = {'recognition': ('embed', make_embed), 'anti_spoofing': ('live_logits', _live_logits)}


# Each prediction's per-client field: where `Algorithm.personalized`'s models go.
PERSONAL = {'embed': 'personal_embed', 'live_logits': 'personal_live_logits'}


def personal_inputs(predicted: dict, personal) -> dict:
  """The `EvalInputs` fields of the method's personal models (`Algorithm.personalized`'s, or
  None): the per-client field of the prediction the task makes (`predictions`' one not None)."""
  return {PERSONAL[field]: personal for field, fn in predicted.items() if fn is not None}


def predictions(model, task: str) -> Callable[[Any], dict[str, Callable]]:
  """`(variables) -> {EvalInputs field: its function}`: the prediction `task`'s evaluators take
  (`PREDICTIONS`), for `EvalInputs(**predictions(model, task)(variables), ...)`."""
  field, make = PREDICTIONS[task]
  predict = make(model)
  others = {other: None for other, _ in PREDICTIONS.values() if other != field}
  return lambda variables: {field: predict(variables), **others}


def evaluate(evaluators: list[Evaluator], inputs: EvalInputs) -> dict[str, EvalOutput]:
  """Runs every evaluator; returns type -> its output (those with nothing to say left out)."""
  outputs = {e.type: e.evaluate(inputs) for e in evaluators}
  return {kind: output for kind, output in outputs.items() if output is not None}
