"""The repository cites what is in the repository: every fact from outside sits in
docs/references.md with its public source, and the code points at a section of it by name."""

import os
import re
import subprocess

import fedjax_face

REPO = os.path.dirname(os.path.dirname(fedjax_face.__file__))
REFERENCES = 'docs/references.md'
# A pointer as the code writes it: `docs/references.md, <section name>`.
POINTER = re.compile(r'docs/references\.md,\s+([a-z0-9][a-z0-9-]*)')
SECTION = re.compile(r'^## ([a-z0-9][a-z0-9-]*)\s*$', re.MULTILINE)
# The notes file that lived outside the repository; spelled in two parts so that this test does
# not name it itself.
OUTSIDE_NOTES = 'REFERENCE' + '_NOTES'
# Archived run outputs keep the text they were written with.
ARCHIVES = ('results/',)
TEXT_SUFFIXES = ('.py', '.md', '.txt', '.cff', '.toml', '.cfg', '.json', '.yaml', '.yml', '.sh')


def tracked_files() -> list[str]:
  """The repository's tracked files (relative paths) that exist in the working tree."""
  listing = subprocess.run(['git', 'ls-files', '-z'], cwd=REPO, capture_output=True, check=True)
  names = [name for name in listing.stdout.decode().split('\0') if name]
  return [name for name in names if os.path.isfile(os.path.join(REPO, name))]


def read(name: str) -> str:
  with open(os.path.join(REPO, name), 'rb') as f:
    return f.read().decode('utf-8', errors='replace')


def sections() -> list[str]:
  return SECTION.findall(read(REFERENCES))


def pointers() -> dict[str, list[str]]:
  """Section name -> the files that point at it."""
  cited: dict[str, list[str]] = {}
  for name in tracked_files():
    if name.startswith(ARCHIVES) or not name.endswith(TEXT_SUFFIXES) or name == REFERENCES:
      continue
    for section in POINTER.findall(read(name)):
      cited.setdefault(section, []).append(name)
  return cited


def test_pointer_pattern_reads_the_forms_the_code_uses():
  text = ('(docs/references.md, pad-metrics): ...\n'
          '# docs/references.md, ijb-protocol\n'
          'held in (docs/references.md,\n  xla-cpu-loops: ~18x)')
  assert POINTER.findall(text) == ['pad-metrics', 'ijb-protocol', 'xla-cpu-loops']
  assert SECTION.findall('# Title\n## arcface-fallback\n**A title**\n### not-a-section\n') == [
      'arcface-fallback']


def test_no_tracked_file_cites_notes_outside_the_repository():
  citing = [name for name in tracked_files()
            if not name.startswith(ARCHIVES) and OUTSIDE_NOTES in read(name)]
  assert citing == [], f'cite {REFERENCES} and a section instead, in: {citing}'


def test_every_pointer_names_a_section():
  known = set(sections())
  unknown = {section: files for section, files in pointers().items() if section not in known}
  assert unknown == {}, f'no such section in {REFERENCES}: {unknown}'


def test_sections_are_unique_and_each_names_its_source():
  names = sections()
  assert len(names) >= 10 and len(names) == len(set(names)), names
  bodies = SECTION.split(read(REFERENCES))[2::2]
  assert len(bodies) == len(names)
  # Each section says where its facts come from: a paper, the authors' code, or a public source.
  unsourced = [name for name, body in zip(names, bodies)
               if not re.search(r'\b(Sources?|Paper|Code):', body)]
  assert unsourced == []


def test_the_code_points_here():
  # The citations were moved here from outside; a sample of them must resolve.
  cited = pointers()
  for section, expected in (('insightface-recordio', 'fedjax_face/data/formats/recordio.py'),
                            ('pad-metrics', 'fedjax_face/eval/pad/metrics.py'),
                            ('xla-cpu-loops', 'fedjax_face/core/engine.py')):
    assert expected in cited.get(section, []), (section, cited.get(section))
