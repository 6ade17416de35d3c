"""The tests' own writer of an IJB set in insightface's (or FedFR's) layout, from embedded-benchmark
faces with the renderer's landmarks.

Each of `num_subjects` identities has `templates_per_subject` templates of `medias` medias of
`images_per_media` frontal faces (rendered at `size` px: the loose crops). Template t of subject s
has id 100 + 10 s + t; the 1:1 protocol is every template pair; for 1:N, G1 holds the first
template of the first half of the subjects, G2 that of the others, and the probes are every other
template.
"""

import os

import numpy as np

from fedjax_face.data.formats import ijb, recordio
from fedjax_face.data.synthetic import identities, nuisance, render


class Written:
  """What the writer wrote, for the tests to compare with."""

  def __init__(self):
    self.names, self.templates, self.medias, self.subjects = [], [], [], []
    self.landmarks, self.faceness, self.images = [], [], []
    self.pairs, self.labels = [], []
    self.galleries, self.probes = {'G1': [], 'G2': []}, []


def template_id(subject: int, t: int) -> int:
  return 100 + 10 * subject + t


def write_ijb(root, *, ijb_set: str = 'IJBC', layout: str = 'insightface', num_subjects: int = 4,
              templates_per_subject: int = 2, medias: int = 2, images_per_media: int = 2,
              size: int = 48, seed: int = 0) -> Written:
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  people = identities.sample_identities(rng, num_subjects)
  out = Written()
  for s in range(num_subjects):
    for t in range(templates_per_subject):
      for m in range(medias):
        for i in range(images_per_media):
          out.names.append(f'{s}_{t}_{m}_{i}.png')
          out.subjects.append(s)
          out.templates.append(template_id(s, t))
          out.medias.append(1000 + 100 * s + 10 * t + m)
  n = len(out.names)
  subjects = np.asarray(out.subjects)
  ip = identities.take(people, subjects)
  nz = nuisance.sample_nuisance(rng, n, 'cfp_frontal', 1.0)
  nz['yaw'][:] = 0.0
  nz['pitch'][:] = 0.0
  out.images = render.render_faces(ip, nz, size)
  out.landmarks = render.face_landmarks(ip, nz, size)
  out.faceness = rng.uniform(0.5, 1.0, n).astype(np.float32)
  os.makedirs(os.path.join(root, 'loose_crop'), exist_ok=True)
  for name, image in zip(out.names, out.images):
    with open(os.path.join(root, 'loose_crop', name), 'wb') as f:
      f.write(recordio.encode_image(image, 'png'))
  meta = ijb.meta_dir(root, ijb_set, layout)
  os.makedirs(meta, exist_ok=True)
  path = lambda kind: ijb.meta_path(root, ijb_set, layout, kind)
  with open(path('face_tid_mid.txt'), 'w') as f:
    for name, t, m in zip(out.names, out.templates, out.medias):
      f.write(f'{name} {t} {m}\n')
  with open(path('name_5pts_score.txt'), 'w') as f:
    for name, points, score in zip(out.names, out.landmarks, out.faceness):
      f.write(name + ' ' + ' '.join(f'{v:.4f}' for v in points.reshape(-1)) + f' {score:.4f}\n')
  all_templates = sorted({(template_id(s, t), s) for s in range(num_subjects)
                          for t in range(templates_per_subject)})
  with open(path('template_pair_label.txt'), 'w') as f:
    for a, (t1, s1) in enumerate(all_templates):
      for t2, s2 in all_templates[a + 1:]:
        f.write(f'{t1} {t2} {int(s1 == s2)}\n')
        out.pairs.append((t1, t2))
        out.labels.append(s1 == s2)
  rows = lambda template: [(name, s) for name, tt, s in zip(out.names, out.templates,
                                                             out.subjects) if tt == template]
  for g, subject_range in (('G1', range(num_subjects // 2)),
                           ('G2', range(num_subjects // 2, num_subjects))):
    with open(path(f'1N_gallery_{g}.csv'), 'w') as f:
      f.write('TEMPLATE_ID,SUBJECT_ID,FILENAME\n')
      for s in subject_range:
        for name, _ in rows(template_id(s, 0)):
          f.write(f'{template_id(s, 0)},{s},img/{name}\n')
        out.galleries[g].append((template_id(s, 0), s))
  with open(path('1N_probe_mixed.csv'), 'w') as f:
    f.write('TEMPLATE_ID,SUBJECT_ID,FILENAME\n')
    for s in range(num_subjects):
      for t in range(1, templates_per_subject):
        for name, _ in rows(template_id(s, t)):
          f.write(f'{template_id(s, t)},{s},frames/{name}\n')
        out.probes.append((template_id(s, t), s))
  return out


def meta_lines(root, kind: str, *, ijb_set: str = 'IJBC', layout: str = 'insightface'
               ) -> list[str]:
  """The lines of meta file `kind` ('template_pair_label.txt', ...), without their newlines."""
  with open(ijb.meta_path(os.fspath(root), ijb_set, layout, kind)) as f:
    return f.read().splitlines()


def rewrite_meta(root, kind: str, lines: list[str], *, ijb_set: str = 'IJBC',
                 layout: str = 'insightface') -> str:
  """Meta file `kind` rewritten as `lines` (each ended by a newline, as a file cut at a line
  boundary is); its path."""
  path = ijb.meta_path(os.fspath(root), ijb_set, layout, kind)
  with open(path, 'w') as f:
    f.write(''.join(line + '\n' for line in lines))
  return path
