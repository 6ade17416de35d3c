"""The package as a library: pyproject.toml pins what requirements.txt pins, and nothing is left out
of what `pip install` copies."""

import os
import subprocess
import sys
import tomllib

from packaging.requirements import Requirement   # pytest's own dependency

import fedjax_face

REPO = os.path.dirname(os.path.dirname(fedjax_face.__file__))


def requirement_lines(path: str) -> list[str]:
  """requirements.txt's requirements, comments and blank lines dropped."""
  with open(path) as f:
    lines = [line.split(' #')[0].strip() for line in f if not line.lstrip().startswith('#')]
  return [line for line in lines if line]


def normalized(lines: list[str]) -> list[str]:
  """Each requirement as packaging writes it: name, pin and marker, spacing made canonical."""
  return sorted(str(Requirement(line)) for line in lines)


def pyproject() -> dict:
  with open(os.path.join(REPO, 'pyproject.toml'), 'rb') as f:
    return tomllib.load(f)


def test_pyproject_pins_exactly_what_requirements_txt_pins():
  project = pyproject()['project']
  extras = project['optional-dependencies']
  runtime, test, flower = project['dependencies'], extras['test'], extras['flower']
  required = requirement_lines(os.path.join(REPO, 'requirements.txt'))
  assert normalized(runtime + test + flower) == normalized(required)
  assert len(set(normalized(required))) == len(required)   # each package once
  # The test extra is the test runner, the tests' reference implementations (galois, onnxruntime)
  # and the optional readers' packages (PyAV: the video extra, which the tests of
  # tools/pad_frames.py need; onnx: the onnx extra); everything else is needed to run.
  assert {Requirement(line).name for line in test} == {'pytest', 'pytest-xdist', 'galois', 'av',
                                                       'onnx', 'onnxruntime'}
  for extra, package in (('video', 'av'), ('onnx', 'onnx')):
    pins = project['optional-dependencies'][extra]
    assert normalized(pins) == [r for r in normalized(test) if Requirement(r).name == package]
  # The flower extra is flwr and the pins it forces beside TensorFlow and onnx (protobuf below 7).
  assert {Requirement(line).name for line in flower} == {
      'flwr', 'protobuf', 'cryptography', 'grpcio', 'grpcio-health-checking'}
  # Every line is an exact pin, and TensorFlow keeps the platform marker of its CPU wheel.
  assert all(str(Requirement(line).specifier).startswith('==') for line in runtime + test + flower)
  tensorflow = next(Requirement(line) for line in runtime if line.startswith('tensorflow-cpu'))
  assert str(tensorflow.marker) == 'sys_platform == "linux" and platform_machine == "x86_64"'


def test_pyproject_packages_the_library_alone():
  config = pyproject()
  assert config['project']['name'] == 'fedjax_face'
  assert config['project']['requires-python'] == '>=3.11'
  assert config['tool']['setuptools']['packages']['find'] == {'include': ['fedjax_face*']}


def test_every_folder_of_python_files_is_a_package():
  # setuptools' find_packages copies folders with an __init__.py only: a folder without one
  # works from the checkout and is missing from an installed wheel.
  package_dir = os.path.dirname(fedjax_face.__file__)
  missing = [os.path.relpath(folder, REPO) for folder, _, names in os.walk(package_dir)
             if '__pycache__' not in folder and any(n.endswith('.py') for n in names)
             and '__init__.py' not in names]
  assert missing == []


def test_the_command_runs_from_another_directory(tmp_path):
  # Importable (as `pip install` makes it) and run from elsewhere: nothing reads the cwd.
  env = os.environ | {'PYTHONPATH': REPO}
  proc = subprocess.run([sys.executable, '-m', 'fedjax_face.main', '--help'], cwd=tmp_path,
                        capture_output=True, text=True, env=env)
  # absl's --help prints the usage and exits with status 1; an import failure would be a traceback.
  assert 'Traceback' not in proc.stderr, proc.stderr[-2000:]
  assert 'python -m fedjax_face.main --config=' in proc.stdout and '--workdir' in proc.stdout
