"""Small fakes the tables' tests share: a run's results.json, and a table with one ordering."""

from fedjax_face.tools.tables.spec import Ordering, Row, Run, Table


def fake_result(lfw=None, rank_1=None, tpir=None) -> dict:
  """A results.json with an LFW-like accuracy and identification rates, where given."""
  out = {}
  if lfw is not None:
    out['verification'] = {'lfw': {'accuracy': lfw}}
  if rank_1 is not None:
    out['identification'] = {'rank_1': rank_1, 'tpir_at_fpir': {'0.01': tpir}}
  return out


def ordered_table(**ordering):
  """Rows A, B, C on LFW and one ordering, A above B unless `ordering` overrides its fields."""
  a, b, c = Run('fedfr/fedfr'), Run('fedfr/fedface'), Run('fedfr/pretrain')
  fields = dict(ahead=('A',), behind=('B',), column='lfw', claim='A above B') | ordering
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (None,)), Row('B', b, (None,)),
                                                Row('C', c, (None,))), 'c',
                orderings=(Ordering(**fields),))
  return table, (a, b, c)
