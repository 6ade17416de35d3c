"""`data.source='insightface'`: an insightface training set `<root>/{train.rec, train.idx,
property}` (RecordIO, read without MXNet: `data/formats/recordio.py`), streamed; pair sets from
`<name>.bin` files."""

from fedjax_face.core import checks
from fedjax_face.data.sources import files
from fedjax_face.data.sources.files import (TASK, PAIR_SET_NAMES, describe, pair_set_title,  # pylint: disable=unused-import
                                            pair_sets, training_views,
                                            identity_probes, check_identity_probes)

DATA_FIELDS = ()



def data_fields(config) -> tuple[str, ...]:
  return files.data_fields(config, DATA_FIELDS)

RESUMABLE_FIELDS = files.RESUMABLE_FIELDS + ('check_record_labels',)


def config_section():
  return files.file_section(
      check_record_labels=True)   # read every image record's header at load and check its label
                                  # against its identity's key range (an .idx pointing at wrong
                                  # records stops the run before round 1)


def check_config(config) -> None:
  files.check_file_section(config)
  checks.check_bool('data.insightface.check_record_labels',
                    config.data.insightface.check_record_labels)


def load(config):
  d = config.data.insightface
  store, labels = files.insightface_store(
      d.root, image_size=config.data.image_size, center_crop=d.center_crop,
      skip_bad_records=d.skip_bad_records, num_threads=config.data.decode_threads,
      check_labels=d.check_record_labels)
  return files.labelled(store, labels, config)
