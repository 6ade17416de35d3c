"""Training faces from TensorFlow Datasets (`lfw`, `celeb_a`, or any data set with an image and an
identity feature), read from a local `data_dir`; nothing is downloaded at run time.

What tensorflow-datasets 4.9.10 does without TensorFlow (checked on this project's machines):

* Reading: a data set prepared in the `array_record` file format is read with
  `builder.as_data_source` (random access, numpy, no TensorFlow), images kept encoded
  (`SkipDecoding`) and decoded here with PIL when a round draws them. This is the path used.
* Preparing: `download_and_prepare(file_format='array_record')` needs no TensorFlow when the
  builder hands TFDS encoded image bytes or files (celeb_a reads files); it needs TensorFlow when
  the builder encodes numpy images or lists directories with `tf.io.gfile` (lfw does). Files already
  in `manual_dir` under the names of the builder's `checksums.tsv` are used instead of downloading.
* A copy prepared in the default `tfrecord` format has no random access: it is read once with
  `tf.data` (TensorFlow required), its encoded images kept in memory.

TFDS (docs/references.md, tfds-face-sets): `lfw` has 13,233 unaligned 250x250 images with
person-name labels (no pairs); `celeb_a` has aligned 218x178 images with `identity/Identity_No`.
Both are cropped to the central square (`data.tfds.center_crop` of the shorter side) and resized
to `data.image_size`. The identities are numbered in sorted order of their label values.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import threading
from typing import Any, Sequence

import numpy as np

from fedjax_face.data import stores
from fedjax_face.data.formats import recordio

# name -> (image feature, identity feature; '/' separates nested keys).
KNOWN = {'lfw': ('image', 'label'), 'celeb_a': ('image', 'identity/Identity_No')}
_LABEL_BLOCK = 1024


class MissingTensorflowError(ImportError):
  """The operation needs TensorFlow, which is not installed (the message says what to do)."""


def _import_tfds():
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError('data.source=tfds needs tensorflow-datasets (pip install '
                      f'tensorflow-datasets): {e}') from None
  return tfds


def has_tensorflow() -> bool:
  return importlib.util.find_spec('tensorflow') is not None


def feature_keys(name: str, label_key: str = '') -> tuple[str, str]:
  """(image key, label key) of a TFDS data set: `label_key` if given, else the KNOWN entry."""
  base = name.split(':')[0].split('/')[0]
  if label_key:
    return KNOWN.get(base, ('image', ''))[0], label_key
  if base not in KNOWN:
    raise ValueError(f'data.tfds.name={name!r}: set data.tfds.label_key to its identity feature '
                     f'(known without it: {sorted(KNOWN)})')
  return KNOWN[base]


def _field(example: dict, key: str, where: str):
  value = example
  for part in key.split('/'):
    if not isinstance(value, dict) or part not in value:
      raise ValueError(f'{where}: no feature {key!r} (features: {sorted(example)})')
    value = value[part]
  return value


def _manual_files(builder) -> list[str]:
  """File names the builder downloads (its checksums.tsv), [] if it lists none."""
  path = os.path.join(os.path.dirname(inspect.getfile(type(builder))), 'checksums.tsv')
  if not os.path.exists(path):
    return []
  with open(path, encoding='utf-8') as f:
    rows = [line.rstrip('\n').split('\t') for line in f if line.strip() and line[0] != '#']
  return [r[3] for r in rows if len(r) >= 4]


def _prepare_from_manual_dir(tfds, builder, manual_dir: str) -> None:
  missing = [f for f in _manual_files(builder) if not os.path.exists(os.path.join(manual_dir, f))]
  if missing:
    raise FileNotFoundError(
        f'data.tfds.manual_dir={manual_dir!r} lacks {missing} for {builder.name}; nothing is '
        'downloaded at run time: put the files there (the names of its checksums.tsv)')
  try:
    builder.download_and_prepare(
        file_format='array_record',
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  except ModuleNotFoundError as e:
    if 'tensorflow' in str(e) and not has_tensorflow():
      raise MissingTensorflowError(
          f'install tensorflow to prepare data.tfds.name={builder.name!r} (its TFDS builder '
          'needs TensorFlow to prepare the data); once prepared as array_record, reading it for '
          f'data.source=tfds needs no TensorFlow ({e})') from None
    raise


def _read_tfrecord(tfds, builder, split: str, image_key: str) -> list[dict]:
  """The examples of a tfrecord-format copy, images still encoded (needs TensorFlow)."""
  if not has_tensorflow():
    raise MissingTensorflowError(
        f'install tensorflow to use data.source=tfds with {builder.data_dir}: it is prepared in '
        'the tfrecord format, which only tf.data reads. Or prepare an array_record copy, read '
        f'without TensorFlow: tfds build {builder.name} --data_dir=... --file_format=array_record')
  dataset = builder.as_dataset(split=split, decoders={image_key: tfds.decode.SkipDecoding()})
  return list(tfds.as_numpy(dataset))


def open_split(name: str, *, split: str, data_dir: str = '', manual_dir: str = '',
               image_key: str = 'image') -> Sequence[dict]:
  """A random-access sequence of the split's examples, images as encoded bytes.

  Raises:
    FileNotFoundError: the data set is not prepared in data_dir (and no manual_dir is given),
      or manual_dir lacks a file.
    MissingTensorflowError: the step needs TensorFlow (see the module docstring).
  """
  tfds = _import_tfds()
  builder = tfds.builder(name, data_dir=data_dir or None)
  if manual_dir and not builder.is_prepared():
    _prepare_from_manual_dir(tfds, builder, manual_dir)
  try:
    return builder.as_data_source(split=split,
                                  decoders={image_key: tfds.decode.SkipDecoding()})
  except (NotImplementedError, AssertionError, FileNotFoundError, ValueError) as e:
    if not builder.is_prepared():
      raise FileNotFoundError(
          f'TFDS data set {name!r} is not prepared in {builder.data_dir} and nothing is '
          f'downloaded at run time: prepare it once (tfds build {name} --data_dir=<data.tfds.root> '
          '--manual_dir=<dir> --file_format=array_record) or set data.tfds.manual_dir '
          f'({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""})') from None
    if isinstance(e, NotImplementedError):  # prepared only in a format without random access
      return _read_tfrecord(tfds, builder, split, image_key)
    raise


def read_labels(source: Sequence[dict], label_key: str, *, where: str
                ) -> tuple[np.ndarray, list]:
  """Identity of every example, numbered in sorted order of the label values: (int64 [N], values).

  Text labels (lfw's person names) come back as bytes and are decoded as UTF-8.
  """
  raw = []
  many = getattr(source, '__getitems__', None)
  for s in range(0, len(source), _LABEL_BLOCK):
    idx = list(range(s, min(s + _LABEL_BLOCK, len(source))))
    block = many(idx) if many is not None else [source[i] for i in idx]
    for i, example in zip(idx, block):
      value = _field(example, label_key, f'{where}[{i}]')
      value = value.item() if isinstance(value, np.ndarray) else value
      raw.append(value.decode('utf-8') if isinstance(value, bytes) else value)
  values = sorted(set(raw))
  lookup = {v: j for j, v in enumerate(values)}
  return np.array([lookup[v] for v in raw], np.int64), values


def image_store(source: Sequence[dict], *, image_key: str, where: str, image_size: int,
                center_crop: float = 1.0, skip_bad_records: bool = False,
                num_threads: int = 0) -> stores.DecodedImageStore:
  """A store decoding example i's image on demand (reads serialised, decoding on the pool)."""
  lock = threading.Lock()  # one reader at a time: data sources promise no thread safety

  def load(i: int) -> np.ndarray:
    with lock:
      image: Any = source[i][image_key]
    if isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3:
      pass  # a source that decodes itself (e.g. TFDS's random mock data)
    else:
      try:
        image = recordio.decode_image(bytes(image))
      except (recordio.ImageDecodeError, TypeError) as e:
        raise stores.BadRecordError(f'{where}[{i}] feature {image_key!r}: {e}; expected an '
                                    'encoded image') from None
    if image.shape[-1] != 3:
      image = np.repeat(image[..., :1], 3, axis=-1)  # greyscale data sets
    return stores.fit_image(image, image_size, center_crop)

  return stores.DecodedImageStore(len(source), (image_size, image_size, 3), load,
                                  description=where, skip_bad_records=skip_bad_records,
                                  num_threads=num_threads)
