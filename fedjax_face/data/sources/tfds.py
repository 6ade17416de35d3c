"""`data.source='tfds'`: a TFDS data set (`name`: lfw, celeb_a, or another with `label_key`)
prepared in the TFDS data_dir `root`, streamed; nothing is downloaded at run time (a set not
prepared there is prepared from `manual_dir` when that holds the builder's files:
`data/formats/tfds_source.py`). Pair sets from `<name>.bin` or `<name>.txt`."""

from fedjax_face.data.formats import tfds_source
from fedjax_face.data.sources import files
from fedjax_face.data.sources.files import (TASK, PAIR_SET_NAMES, describe, pair_set_title,  # pylint: disable=unused-import
                                            pair_sets, training_views,
                                            identity_probes, check_identity_probes)

DATA_FIELDS = ('name', 'split', 'label_key')



def data_fields(config) -> tuple[str, ...]:
  return files.data_fields(config, DATA_FIELDS)

RESUMABLE_FIELDS = files.RESUMABLE_FIELDS


def config_section():
  return files.file_section(
      name='lfw',          # 'lfw' | 'celeb_a' | another with label_key
      split='train',
      label_key='',        # the identity feature; '' = known for lfw / celeb_a
      manual_dir='')       # prepare from these files if not prepared (no download)


def check_config(config) -> None:
  files.check_file_section(config, needs_root=False)   # '' = TFDS's default data_dir
  if not config.data.tfds.name:
    raise ValueError("config.data.tfds.name is empty; data.source='tfds' needs a TFDS name "
                     '(lfw, celeb_a).')


def load(config):
  d = config.data.tfds
  image_key, label_key = tfds_source.feature_keys(d.name, d.label_key)
  source = tfds_source.open_split(d.name, split=d.split, data_dir=d.root,
                                  manual_dir=d.manual_dir, image_key=image_key)
  where = f'tfds {d.name} {d.split}'
  labels, _ = tfds_source.read_labels(source, label_key, where=where)
  store = tfds_source.image_store(source, image_key=image_key, where=where,
                                  image_size=config.data.image_size, center_crop=d.center_crop,
                                  skip_bad_records=d.skip_bad_records,
                                  num_threads=config.data.decode_threads)
  return files.labelled(store, labels, config)
