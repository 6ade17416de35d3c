r"""FedUV (Hosseini et al. 2021; FedFV paper Eq. 4): secret BCH codewords, positive-only clients.

    python -m fedjax_face.main --config=configs/fedfv/feduv.py --workdir=/tmp/feduv        # FedUV-511
    python -m fedjax_face.main --config=configs/fedfv/feduv.py:n=127 --workdir=/tmp/feduv127

Argument (comma separated): n=127|255|511 (the code length, Table 3), paper (the paper's
backbone at 64x64), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import feduv
from fedjax_face.proj.fedfv import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'n': tuple(map(str, feduv.CODE_LENGTHS)), 'paper': (True,),
                                    'runlocal': (True,)})
  c = setting.one_per_client_config('feduv', runlocal=bool(args.get('runlocal')),
                                    paper=bool(args.get('paper')))
  c.model.scaling = True            # "If FedUV is used, there is a Scaling layer in the last"
  c.head.loss = 'positive_dot'      # Eq. 4: max(0, 1 - v^T W' g / ||v||^2)
  c.head.margin = 1.0
  c.head.scale = 1.0
  c.feduv = feduv.config_section()
  c.feduv.code_length = int(args.get('n', 511))
  return c
