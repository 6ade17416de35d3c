"""The privacy attacks, each an evaluator (`eval/__init__.py`'s contract): it reads what an
attacker holds of a finished run (a client's update or the broadcast through `EvalInputs.replay`,
the released model) and reports what it recovers, beside the threat model it assumes
(docs/privacy.md).

  leakage.py     'leakage': identity re-identification from what each party sees
  membership.py  'membership': membership inference on the released model
  inversion.py   gradient inversion of a client's update: Inverting Gradients, DLG / iDLG, the
                 analytic inversion of a linear layer, PSNR and SSIM (the attack library)
  evaluators.py  'inversion': the gradient-inversion evaluator over it
"""
