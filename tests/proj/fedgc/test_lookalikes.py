"""The look-alike calibration tool: ordering of pixel cosines and the family picture."""

from PIL import Image

from fedjax_face.proj.fedgc import lookalikes


def test_lookalikes_sit_between_strangers_and_the_same_person_and_spread_one_is_strangers():
  row = lookalikes.calibration_row(seed=0, spread=0.35, difficulty=1.0, num_pairs=400)
  assert row['strangers'] < row['look-alikes'] < row['same identity']
  independent = lookalikes.calibration_row(seed=0, spread=1.0, difficulty=1.0, num_pairs=2000)
  # Spread 1: family members are independent draws, as far apart as strangers (the bound is
  # about five standard errors of the difference at 1,000 impostor pairs each).
  assert abs(independent['look-alikes'] - independent['strangers']) < 0.03


def test_family_picture_has_a_row_per_family_and_spread(tmp_path):
  lookalikes.family_picture(0, [0.35, 1.0], str(tmp_path / 'f.png'), families=2, members=3,
                            images=2)
  with Image.open(tmp_path / 'f.png') as picture:   # 4 rows x 6 tiles of 96 px, 2 px gaps
    assert picture.size == (6 * 98 + 2, 4 * 98 + 2)
