"""The roster: each holder's description from its own folder, the class table numbered client by
client as `data.source='client_folders'` numbers it, and the refusals, each one line naming the
holder (a client index twice, images of another size, other code)."""

import numpy as np
import pytest

from fedjax_face.core import checks
from fedjax_face.federation import export, holder, roster
from tests.federation import test_equal_to_simulator as direct


@pytest.fixture(scope='module')
def descriptions(holders_root):
  config = direct.folder_config('fedpe', holders_root)
  return config, [holder.Holder(config, k, export.holder_folder(holders_root, k), '/nonexistent')
                  .describe() for k in range(direct.NUM_HOLDERS)]


def test_descriptions_count_each_holders_own_images_and_classes(descriptions):
  config, described = descriptions
  sim = direct.setup_lib.set_up(config, direct.algorithms.get('fedpe'), None).fed
  assert [d.num_examples for d in described] == sim.num_examples.tolist()
  assert [d.num_classes for d in described] == sim.class_mask.sum(axis=1).tolist()
  assert all(d.image_shape == (config.data.image_size,) * 2 + (3,) for d in described)
  assert len({d.code for d in described}) == 1 and described[0].code == roster.code_label()
  np.testing.assert_array_equal(roster.skeleton(described).identity_table, sim.identity_table)


def test_identity_table_numbers_identities_client_by_client():
  np.testing.assert_array_equal(roster.identity_table([2, 3, 1]),
                                [[0, 1, -1], [2, 3, 4], [5, -1, -1]])


def test_bad_rosters_are_refused_naming_the_holder(descriptions):
  config, described = descriptions
  code = described[0].code
  assert roster.check_roster(config, described[::-1], code) == described   # client order
  with pytest.raises(checks.UsageError, match=r'^two data holders say they are client 0; '
                     r'expected each of 0\.\.2 once\.$'):
    roster.check_roster(config, [described[0], described[0], described[2]])
  with pytest.raises(checks.UsageError, match=r'^federated.num_clients=3 but the data holders are '
                     r'clients \[0, 1\]; expected each of 0\.\.2 once\.$'):
    roster.check_roster(config, described[:2])
  small = described[1]._replace(image_shape=(8, 8, 3))
  with pytest.raises(checks.UsageError, match=r'^data holder of client 1: \d+ images of \d+ '
                     r'classes, shape \[8, 8, 3\]; expected data.image_size=16 \(\[16, 16, 3\]\) '
                     r'and at least one image\.$'):
    roster.check_roster(config, [described[0], small, described[2]], code)
  other = described[2]._replace(code='0123456789ab jax==0.0.1')
  with pytest.raises(checks.UsageError, match=r'^data holder of client 2 runs 0123456789ab '
                     r'jax==0\.0\.1; the server runs .*: expected the same code on every party\.$'):
    roster.check_roster(config, [described[0], described[1], other], code)


@pytest.mark.parametrize('change,line', [
    ({'dp.enabled': True, 'secure_aggregation.enabled': True},
     r'^dp\.enabled=True and secure_aggregation\.enabled=True over Flower: each holder would draw '
     r"its share of the noise from keys the server can derive \(the config's seed\) unless the "
     r'holders share a noise secret, which is not built; expected one of them alone\.$'),
    ({'secure_aggregation.enabled': True, 'federated.straggler_drop': 0.25},
     r'^secure_aggregation\.enabled=True and federated\.straggler_drop=0\.25 over Flower: the '
     r"simulator's dropped stragglers are padding rows that take part in the masks, and a "
     r'federation has no holder for them; expected one of them alone\.$'),
    ({'algorithm': 'fedma'}, r"^algorithm='fedma' over Flower: its server's matching changes"),
    ({'algorithm': 'fedgpad'}, r"^algorithm='fedgpad' over Flower: over its runlocal config the "
                               r'federation ends up to 3e-3 from the simulator'),
    ({'algorithm': 'fedfr'}, r"^algorithm='fedfr' over Flower: the roster's skeleton does not "
                             r'carry its public set D_g yet'),
    ({'init_from': '/runs/pretrained'},
     r"^init_from='/runs/pretrained' over Flower: the server and the holders start from the "
     r"method's init \(the config's seed\), not from a run's checkpoint, yet; expected "
     r"init_from=''\.$"),
    ({'algorithm': 'centralized'}, r"^algorithm='centralized' trains one client holding every "
                                   r'identity; nothing to federate'),
    ({'engine.backend': 'vmap'}, r"^engine.backend='vmap' \(vmap here\); a federation runs each "
                                 r"client on its own holder, as the 'loop' backend does"),
])
def test_what_the_bridge_does_not_carry_is_refused_in_one_line(holders_root, change, line):
  config = direct.folder_config('fedpe', holders_root)
  for field, value in change.items():
    if '.' in field:
      section, key = field.split('.')
      config[section][key] = value
    else:
      config[field] = value
  with pytest.raises(checks.UsageError, match=line):
    direct.protocol.check_federable(config)
