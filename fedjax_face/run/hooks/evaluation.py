"""Evaluation: every evaluator on a round state (`evaluate`), mid-run every `eval.every_rounds`
(the hook), and by the driver after the last round."""

from fedjax_face import eval as eval_lib
from fedjax_face.core import engine as engine_lib
from fedjax_face.io import artifacts
from fedjax_face.run import schedule
from fedjax_face.run.hooks import Hook


def evaluate(evaluators, predict, algorithm, state, replay=None) -> dict:
  """Every evaluator on the model of `state` (`predict`: `eval.predictions` of the model):
  type -> `eval.EvalOutput`. Evaluators see the round state itself and `replay(r)`, round r's
  client updates again (None: not available)."""
  state = engine_lib.local_copy(state)   # evaluation runs in each process alone
  personal = algorithm.personalized(state) if algorithm.personalized else None
  predicted = predict(algorithm.eval_variables(state.server))
  # The personal models go where the task's prediction does (a recognition client's embedding,
  # an anti-spoofing data center's live logits).
  inputs = eval_lib.EvalInputs(**predicted, **eval_lib.personal_inputs(predicted, personal),
                               class_embeddings=algorithm.class_embeddings(state), state=state,
                               replay=replay)
  return eval_lib.evaluate(evaluators, inputs)


def eval_scalars(outputs: dict) -> dict[str, float]:
  """TensorBoard scalars of an evaluation: eval/<type>/<name>."""
  return {f'eval/{kind}/{name}': value for kind, out in outputs.items()
          for name, value in out.scalars.items()}


def mid_run_evaluation(config, evaluators, predict, algorithm, workdir: str, writer) -> Hook:
  """Evaluates the rounds `schedule.evaluation_due` picks; process 0 (`writer` not None) writes
  the figures and arrays and the eval/ scalars."""

  def after_round(end):
    if not schedule.evaluation_due(config, end.done):
      return
    outputs = evaluate(evaluators, predict, algorithm, end.state)
    if writer is not None:
      artifacts.write_eval_outputs(workdir, outputs)
      writer.write_scalars(end.done, eval_scalars(outputs))

  return Hook(after_round=after_round)
