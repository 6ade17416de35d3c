"""The package's import graph: the layers in their order (WORKSPACE.md, "Layers"), no cycles, and
the shared config never reaches a method."""

import ast
import os

import fedjax_face

PACKAGE_DIR = os.path.dirname(fedjax_face.__file__)

# The package's layers, lowest first: a module imports only from its own layer or below. Within a
# layer, imports must not cycle (`test_no_import_cycles`).
LAYERS = (
    ('fedjax_face.core',),                            # the engine, its contract, checks
    ('fedjax_face.io',),                              # workdir files, checkpoints, reports
    ('fedjax_face.data', 'fedjax_face.models'),       # data sources and formats; backbones, heads
    ('fedjax_face.algorithms',),                      # the methods
    ('fedjax_face.eval',),                            # evaluators and their metrics
    ('fedjax_face.config_lib',),                      # a task's config, from its owners' sections
    ('fedjax_face.run',),                             # the run: setup, rules, loop, hooks, results
    ('fedjax_face.experiment', 'fedjax_face.main',    # the driver and its command lines;
     'fedjax_face.evaluate', 'fedjax_face.export',    # a backbone in arcface_torch's layout;
     'fedjax_face.federation'),                       # a real federation over Flower
    ('fedjax_face.tools',),                           # bench, tables, compare
    ('fedjax_face.proj',),                            # what belongs to one paper
    ('fedjax_face.reproduce',),                       # every paper's tables
)


def module_files() -> dict[str, str]:
  """Dotted name -> file, for every module of the package (a package is its __init__.py)."""
  modules = {}
  root = os.path.dirname(PACKAGE_DIR)
  for folder, _, files in os.walk(PACKAGE_DIR):
    for name in files:
      if not name.endswith('.py'):
        continue
      path = os.path.join(folder, name)
      dotted = os.path.relpath(path, root)[:-3].replace(os.sep, '.')
      modules[dotted.removesuffix('.__init__')] = path
  return modules


def imports_of(path: str, name: str, modules: dict[str, str]) -> set[str]:
  """The package's modules that `name` imports anywhere in its file (lazy imports included).

  `from a.b import c` is an edge to a.b.c when c is a module, else to a.b. Parent packages
  imported implicitly are not edges: a package's __init__ importing its own modules is the usual
  layout and no cycle at run time.
  """
  tree = ast.parse(open(path).read(), path)
  package = name if path.endswith('__init__.py') else name.rpartition('.')[0]
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        parts = package.split('.')
        base = '.'.join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
      for alias in node.names:
        found.add(f'{base}.{alias.name}' if f'{base}.{alias.name}' in modules else base)
  return {m for m in found if m in modules and m != name}


def _read_graph() -> dict[str, set[str]]:
  modules = module_files()
  return {name: imports_of(path, name, modules) for name, path in modules.items()}


# Read once, when pytest collects this file, before any test runs: CPython 3.11's ast.parse can
# fail later in a long test process with "SystemError: AST constructor recursion depth mismatch"
# (its AST-construction depth counter is shared state, python/cpython#106905), which the CI run
# hit in the middle of the suite. What is read is the same at any time.
_GRAPH = _read_graph()


def import_graph() -> dict[str, set[str]]:
  return {name: set(edges) for name, edges in _GRAPH.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import cycle as [a, b, ..., a], or None (depth-first search, three colours)."""
  state, stack = {}, []

  def visit(node):
    state[node] = 'open'
    stack.append(node)
    for nxt in sorted(graph[node]):
      if state.get(nxt) == 'open':
        return stack[stack.index(nxt):] + [nxt]
      if nxt not in state:
        cycle = visit(nxt)
        if cycle:
          return cycle
    state[node] = 'done'
    stack.pop()
    return None

  for node in sorted(graph):
    if node not in state:
      cycle = visit(node)
      if cycle:
        return cycle
  return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
  seen, todo = set(), [start]
  while todo:
    for nxt in graph[todo.pop()] - seen:
      seen.add(nxt)
      todo.append(nxt)
  return seen


def layer_of(module: str) -> int:
  """The index in LAYERS of `module`'s layer; KeyError for a module no layer names. The package
  itself (its __init__, which imports nothing of it) is below every layer."""
  if module == 'fedjax_face':
    return -1
  for index, prefixes in enumerate(LAYERS):
    if any(module == p or module.startswith(p + '.') for p in prefixes):
      return index
  raise KeyError(f'{module} is in no layer of LAYERS; add it there and to WORKSPACE.md.')


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
  """'a -> b' for every import of a module from a higher layer than the importer's."""
  return [f'{a} -> {b}' for a, edges in sorted(graph.items()) for b in sorted(edges)
          if layer_of(b) > layer_of(a)]


def test_the_graph_is_read_correctly():
  graph = import_graph()
  assert 'fedjax_face.algorithms.fedgc.regularizer' in graph['fedjax_face.algorithms.fedgc.streamed']
  assert 'fedjax_face.core.arrays' in graph['fedjax_face.algorithms.pairwise']
  assert len(graph) > 50
  assert find_cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}) == ['a', 'b', 'c', 'a']
  assert find_cycle({'a': {'b'}, 'b': set()}) is None


def test_every_module_has_a_layer():
  for module in import_graph():
    layer_of(module)


def test_no_module_imports_from_a_higher_layer():
  assert upward_imports(import_graph()) == []


def test_an_upward_import_is_found():
  graph = {'fedjax_face.core.engine': {'fedjax_face.data.stores'},
           'fedjax_face.data.stores': {'fedjax_face.core.arrays'}, 'fedjax_face.core.arrays': set()}
  assert upward_imports(graph) == ['fedjax_face.core.engine -> fedjax_face.data.stores']


def test_no_import_cycles():
  assert find_cycle(import_graph()) is None


def test_shared_config_and_core_never_import_a_method():
  graph = import_graph()
  for start in ('fedjax_face.config_lib', 'fedjax_face.core.engine', 'fedjax_face.eval'):
    methods = sorted(m for m in reachable(graph, start) | {start}
                     if m.startswith('fedjax_face.algorithms'))
    assert not methods, f'{start} imports {methods}'


# What run/ may not import: a task's evaluators, data formats and data sources (it reaches them
# through the registries `fedjax_face.eval` and `fedjax_face.data.sources`).
TASK_MODULES = ('fedjax_face.eval.recognition', 'fedjax_face.eval.pad', 'fedjax_face.data.formats',
                'fedjax_face.data.sources.', 'fedjax_face.data.synthetic')


def task_imports(graph: dict[str, set[str]]) -> list[str]:
  """'a -> b' for every import by a module of fedjax_face.run of a `TASK_MODULES` module."""
  return [f'{a} -> {b}' for a, edges in sorted(graph.items()) for b in sorted(edges)
          if (a == 'fedjax_face.run' or a.startswith('fedjax_face.run.'))
          and b.startswith(TASK_MODULES)]


def test_run_imports_no_task_evaluator_or_data_format():
  assert task_imports(import_graph()) == []
  assert task_imports({'fedjax_face.run.setup': {'fedjax_face.data.sources.pad_lists',
                                                 'fedjax_face.data.sources'}}) == [
      'fedjax_face.run.setup -> fedjax_face.data.sources.pad_lists']


def config_fields() -> set[str]:
  """Every field of every task's base config and method section, flattened ('dp.clip_norm'), and
  the top-level names ('num_rounds', 'dp')."""
  from fedjax_face import algorithms, config_lib
  from fedjax_face.run import resume
  fields = set()
  for task in ('recognition', 'anti_spoofing'):
    flat = resume.flatten(config_lib.base_config(task).to_dict())
    fields |= set(flat) | {key.split('.')[0] for key in flat}
  for name in algorithms.ALGORITHMS:
    section = algorithms.get(name).config_section()
    if section is not None:
      fields |= {f'{name}.{key}' for key in resume.flatten(section.to_dict())} | {name}
  return fields


def named_config_fields(path: str, fields: set[str]) -> list[str]:
  """The config fields a module's text names: 'config.<field>' anywhere in it (code, strings,
  docstrings), and string constants that are a dotted field ('dp.clip_norm')."""
  text = open(path).read()
  found = {f'config.{m}' for m in __import__('re').findall(r'config\.([a-z_][\w.]*\w)', text)
           if m in fields or m.split('.')[0] in fields}
  for node in ast.walk(ast.parse(text, path)):
    if (isinstance(node, ast.Constant) and isinstance(node.value, str) and '.' in node.value
        and node.value in fields):
      found.add(repr(node.value))
  return sorted(found)


def test_io_names_no_config_field():
  fields = config_fields()
  assert {'num_rounds', 'dp.target_epsilon', 'fedgc.reg_lambda'} <= fields
  named = {name: named_config_fields(path, fields) for name, path in module_files().items()
           if name.startswith('fedjax_face.io')}
  assert {name: found for name, found in named.items() if found} == {}


def test_a_named_config_field_is_found(tmp_path):
  module = tmp_path / 'm.py'
  module.write_text('"""Reads config.dp.clip_norm."""\nKEY = "dp.clip_norm"\nOTHER = "a.b"\n')
  assert named_config_fields(str(module), {'dp', 'dp.clip_norm'}) == [
      "'dp.clip_norm'", 'config.dp.clip_norm']
