"""`data.source='image_folder'`: `<root>/<identity>/*.jpg` (one folder per identity, the sorted
folder names numbering the identities), streamed; pair sets from `<name>.bin` or `<name>.txt`
lists (`data/formats/image_folder.py`)."""

from fedjax_face.data.formats import image_folder
from fedjax_face.data.sources import files
from fedjax_face.data.sources.files import (TASK, PAIR_SET_NAMES, describe, pair_set_title,  # pylint: disable=unused-import
                                            pair_sets, training_views,
                                            identity_probes, check_identity_probes)

DATA_FIELDS = ()



def data_fields(config) -> tuple[str, ...]:
  return files.data_fields(config, DATA_FIELDS)

RESUMABLE_FIELDS = files.RESUMABLE_FIELDS


def config_section():
  return files.file_section()


def check_config(config) -> None:
  files.check_file_section(config)


def load(config):
  d = config.data.image_folder
  paths, labels, _ = image_folder.scan(d.root)
  store = image_folder.image_store(d.root, paths, image_size=config.data.image_size,
                                   center_crop=d.center_crop,
                                   skip_bad_records=d.skip_bad_records,
                                   num_threads=config.data.decode_threads)
  return files.labelled(store, labels, config)
