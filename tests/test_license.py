"""The license and the citation file: LICENSE is the Apache License 2.0 under this project's
copyright, pyproject.toml names the same license, and CITATION.cff cites this software and the
four papers it implements (BUILD_NOTES.md, "License")."""

import importlib.metadata
import os
import tomllib

import pytest
import yaml   # PyYAML: a dependency of flax, ml-collections and orbax-checkpoint

import fedjax_face

REPO = os.path.dirname(os.path.dirname(fedjax_face.__file__))
COPYRIGHT = 'Copyright 2026 The fedjax_face Authors.'
# The four papers, by a fragment of each title as CITATION.cff spells it.
PAPERS = {
    'FedGC': 'Federated Learning for Face Recognition with Gradient Correction',
    'FedFV': 'FedFV: federated face verification via equivalent class embeddings',
    'FedFR': 'FedFR: Joint Optimization Federated Framework for Generic and Personalized Face',
    'FedGPAD': 'Federated Generalized Face Presentation Attack Detection',
}


def read(name: str) -> str:
  with open(os.path.join(REPO, name)) as f:
    return f.read()


def pyproject() -> dict:
  with open(os.path.join(REPO, 'pyproject.toml'), 'rb') as f:
    return tomllib.load(f)


def citation() -> dict:
  return yaml.safe_load(read('CITATION.cff'))


def test_license_is_apache_2_under_the_projects_copyright():
  text = read('LICENSE')
  first, rest = text.split('\n', 1)
  assert first == COPYRIGHT
  assert 'Apache License' in rest and 'Version 2.0, January 2004' in rest
  assert 'END OF TERMS AND CONDITIONS' in rest


def test_license_text_is_the_standard_one():
  # jax ships the unmodified Apache-2.0 text; the file is that text under one copyright line.
  try:
    reference = importlib.metadata.distribution('jax').read_text('licenses/LICENSE')
  except (importlib.metadata.PackageNotFoundError, FileNotFoundError):
    reference = None
  if not reference or 'Apache License' not in reference:
    pytest.skip('the installed jax ships no licenses/LICENSE to compare with')
  assert read('LICENSE').split('\n', 1)[1] == reference


def test_pyproject_names_the_same_license():
  project = pyproject()['project']
  assert project['license'] == 'Apache-2.0'
  assert project['license-files'] == ['LICENSE']
  # The SPDX-string form of `license` needs setuptools 77 or later to build.
  assert pyproject()['build-system']['requires'] == ['setuptools>=77']


def test_citation_cites_this_software():
  cff = citation()
  for key in ('cff-version', 'message', 'title', 'authors'):   # CFF 1.2.0's required keys
    assert cff.get(key), key
  assert cff['cff-version'] == '1.2.0'
  assert cff['type'] == 'software'
  assert cff['title'] == 'fedjax_face'
  assert cff['authors'] == [{'name': 'The fedjax_face Authors'}]
  project = pyproject()['project']
  assert cff['version'] == project['version']
  assert cff['license'] == project['license']
  assert str(cff['date-released']).startswith('2026-')


def test_citation_lists_the_four_papers():
  references = citation()['references']
  titles = [' '.join(str(r['title']).split()) for r in references]
  for method, title in PAPERS.items():
    assert sum(title in t for t in titles) == 1, (method, titles)
  assert len(references) == len(PAPERS)
  for reference in references:
    assert reference['type'] in ('article', 'conference-paper')
    assert reference['authors'] and all(a.get('family-names') for a in reference['authors'])
    assert reference['year'] == 2022
