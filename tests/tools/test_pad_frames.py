"""tools/pad_frames.py and data/formats/pad_videos.py on videos the tests encode themselves
(PyAV, lossless codecs, so every decoded frame is the frame written): the sampling rules, the
three box sources, each layout read back by its reader, and every bad input named. The command
line runs in a child forked from a process that has imported its dependencies
(tests/forked_commands.py: its own process, flags, exit status, stdout and stderr)."""

import csv
import json
import os

import av
import numpy as np
from PIL import Image
import pytest

from fedjax_face.data.formats import pad_lists
from fedjax_face.data.formats import pad_videos
from fedjax_face.data.formats.pad_videos import PadVideoError
from fedjax_face.tools import pad_frames
from tests import forked_commands

H, W, SIZE = 24, 32, 16
# (path, live, frames, container codec): CASIA-like names, one of each container.
VIDEOS = [('s1/live_1.avi', True, 14, 'ffv1'), ('s1/attack_1.mov', False, 13, 'png'),
          ('s2/live_2.mov', True, 16, 'png'), ('s2/attack_2.avi', False, 14, 'rawvideo')]


def frame_pixels(video: str, number: int) -> np.ndarray:
  """The frame the fixture writes: random, seeded by the video and the frame number."""
  seed = [number] + [ord(c) for c in video]
  return np.random.default_rng(seed).integers(0, 256, (H, W, 3), dtype=np.uint8)


def write_video(path: str, video: str, n: int, codec: str) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with av.open(path, 'w') as container:
    stream = container.add_stream(codec, rate=25)
    stream.width, stream.height = W, H
    stream.pix_fmt = {'ffv1': 'bgr0', 'png': 'rgb24', 'rawvideo': 'bgr24'}[codec]
    for i in range(n):
      frame = av.VideoFrame.from_ndarray(frame_pixels(video, i), format='rgb24')
      for packet in stream.encode(frame):
        container.mux(packet)
    for packet in stream.encode():
      container.mux(packet)


def dat_box(video: str, number: int) -> tuple[int, int, int, int]:
  """(x, y, w, h) of the fixture's face in a frame: moves with the frame."""
  return 2 + number % 5, 1 + number % 3, 14 + len(video) % 3, 16


@pytest.fixture(scope='module')
def videos(tmp_path_factory):
  """A video root with the four videos, their `.dat` boxes, a CSV of the same boxes and the
  video list."""
  root = tmp_path_factory.mktemp('videos')
  for video, _, n, codec in VIDEOS:
    write_video(str(root / video), video, n, codec)
    with open(root / (os.path.splitext(video)[0] + '.dat'), 'w') as f:
      for i in range(n):
        x, y, w, h = dat_box(video, i)
        f.write(f'{y}, {x}, {w}, {h}\n')       # CASIA's order: y1, x1, w, h
  with open(root / 'boxes.csv', 'w', newline='') as f:
    rows = csv.writer(f)
    rows.writerow(pad_videos.CSV_HEADER)
    for video, _, n, _ in VIDEOS:
      rows.writerows([video, i, *dat_box(video, i)] for i in range(n))
  (root / 'videos.txt').write_text(''.join(f'{v} {int(live)}\n' for v, live, _, _ in VIDEOS))
  return root


def read_png(path) -> np.ndarray:
  return np.asarray(Image.open(path).convert('RGB'))


def test_decoded_frames_are_the_frames_written(videos):
  for video, _, n, _ in VIDEOS:
    got = list(pad_videos.decoded_frames(str(videos / video), video))
    assert len(got) == n
    for i, frame in enumerate(got):
      np.testing.assert_array_equal(frame, frame_pixels(video, i))


@pytest.mark.parametrize('sampling,k,n,want', [('ssdg', 1, 10, [6]), ('ssdg', 2, 10, [6, 11]),
                                               ('ssdg', 2, 14, [6, 13]), ('every', 4, 10,
                                                                          [0, 4, 8]),
                                               ('all', 1, 3, [0, 1, 2])])
def test_sampling_rules(sampling, k, n, want):
  assert pad_videos.sampled(n, sampling, k) == want


def test_fedgpad_layout_with_dat_boxes_holds_the_exact_crops_and_reads_back(videos, tmp_path):
  out = tmp_path / 'CASIA'
  done = pad_frames.extract(str(videos / 'videos.txt'), str(out), layout='fedgpad',
                            split='train', sampling='ssdg', frames=1, boxes='dat', size=SIZE,
                            progress=False)
  assert done['videos'] == 4 and done['frames'] == 4
  # SSDG's rule at k = 1 keeps frame 6 of each; the crop is the .dat box resized.
  for video, _, _, _ in VIDEOS:
    saved = read_png(out / f'{os.path.splitext(video)[0]}/00006.png')
    np.testing.assert_array_equal(
        saved, pad_videos.crop(frame_pixels(video, 6), dat_box(video, 6), SIZE))
  assert (out / 'image_list_real.txt').read_text() == (
      's1/live_1/00006.png 1\ns2/live_2/00006.png 1\n')
  assert (out / 'image_list_fake.txt').read_text() == (
      's1/attack_1/00006.png 0\ns2/attack_2/00006.png 0\n')
  frames = pad_lists.read_fedgpad(str(out), 'train', depth_dirs=2, depth_policy='ones')
  assert sorted(zip(frames.paths, frames.live)) == sorted(
      (str(out / f'{os.path.splitext(v)[0]}/00006.png'), live) for v, live, _, _ in VIDEOS)


def test_an_ssdg_list_of_every_frame_samples_as_the_tool_does(videos, tmp_path):
  """Written with every frame (no video ids), SSDG's reader keeps the frames the tool keeps with
  --sampling=ssdg."""
  every = pad_frames.extract(str(videos / 'videos.txt'), str(tmp_path / 'every'), layout='ssdg',
                             split='test', sampling='all', boxes='center', size=SIZE,
                             progress=False)
  assert every['frames'] == sum(n for _, _, n, _ in VIDEOS)
  items = json.loads((tmp_path / 'every' / 'test_label.json').read_text())
  assert all('photo_belong_to_video_ID' not in item for item in items)
  sampled = pad_frames.extract(str(videos / 'videos.txt'), str(tmp_path / 'sampled'),
                               layout='ssdg', split='test', sampling='ssdg', frames=2,
                               boxes='center', size=SIZE, progress=False)
  assert sampled['frames'] == 8
  items = json.loads((tmp_path / 'sampled' / 'test_label.json').read_text())
  assert {item['photo_belong_to_video_ID'] for item in items} == {
      os.path.splitext(v)[0] for v, _, _, _ in VIDEOS}
  read = lambda d: pad_lists.read_ssdg(str(tmp_path / d), 'test', frames_per_video=2)
  a, b = read('every'), read('sampled')
  rel = lambda frames, d: [os.path.relpath(p, tmp_path / d) for p in frames.paths]
  assert rel(a, 'every') == rel(b, 'sampled') and list(a.live) == list(b.live)
  for pa, pb in zip(a.paths, b.paths):
    np.testing.assert_array_equal(read_png(pa), read_png(pb))
  # A centre crop: the frame's central square, resized.
  video = VIDEOS[0][0]
  np.testing.assert_array_equal(
      read_png(tmp_path / 'sampled' / 's1/live_1/00013.png'),
      pad_videos.crop(frame_pixels(video, 13), pad_videos.center_box(H, W), SIZE))


def test_mcio_layout_with_csv_boxes_keeps_frame0_and_frame1(videos, tmp_path):
  out = tmp_path / 'MSU'
  pad_frames.extract(str(videos / 'videos.txt'), str(out), layout='mcio', split='test',
                     sampling='ssdg', frames=2, boxes='csv', boxes_csv=str(videos / 'boxes.csv'),
                     size=SIZE, progress=False)
  assert (out / 'MSU_real_test.txt').read_text() == (
      'test/real/s1_live_1_frame0.png\ntest/real/s2_live_2_frame0.png\n')
  frames = pad_lists.read_mcio(str(out), 'test')
  assert len(frames.paths) == 8
  # attack_2 has 14 frames: frame0 = frame 6, frame1 = frame 6 + 7.
  for position, number in ((0, 6), (1, 13)):
    np.testing.assert_array_equal(
        read_png(out / f'test/fake/s2_attack_2_frame{position}.png'),
        pad_videos.crop(frame_pixels('s2/attack_2.avi', number),
                        dat_box('s2/attack_2.avi', number), SIZE))


def test_every_kth_frame_and_a_scaled_box(videos, tmp_path):
  done = pad_frames.extract(str(videos / 'videos.txt'), str(tmp_path / 'r'), layout='fedgpad',
                            split='test', sampling='every', frames=4, boxes='dat',
                            box_scale=1.5, size=SIZE, progress=False)
  assert done['frames'] == sum(len(range(0, n, 4)) for _, _, n, _ in VIDEOS)
  video = VIDEOS[1][0]
  np.testing.assert_array_equal(
      read_png(tmp_path / 'r' / 's1/attack_1/00008.png'),
      pad_videos.crop(frame_pixels(video, 8), dat_box(video, 8), SIZE, box_scale=1.5))
  lines = (tmp_path / 'r' / 'image_list_all.txt').read_text().splitlines()
  assert len(lines) == done['frames'] and lines[4] == 's1/attack_1/00000.png 0'


def _bad_list(root, lines: str):
  path = root / 'bad.txt'
  path.write_text(lines)
  return str(path)


@pytest.mark.parametrize('lines,match', [
    ('s1/live_1.avi\n', r'bad.txt:1: malformed line .*expected `<video path> <label>`'),
    ('s1/live_1.avi 1\ns1/attack_1.mov 2\n', r"bad.txt:2: label '2'; expected 1 \(live\) or 0"),
    ('s1/missing.avi 1\n', r'bad.txt:1: the video .*s1/missing.avi does not exist'),
    ('s1/live_1.dat 1\n', r"bad.txt:1: 's1/live_1.dat' is not a video"),
    ('\n', r'bad.txt: no videos listed'),
])
def test_a_bad_video_list_is_named_by_file_and_line(videos, tmp_path, lines, match):
  with pytest.raises(PadVideoError, match=match):
    pad_frames.extract(_bad_list(videos, lines), str(tmp_path / 'out'), layout='fedgpad',
                       split='train', progress=False)
  assert not (tmp_path / 'out').exists()


def test_a_video_that_does_not_decode_stops_the_tool_and_leaves_nothing(videos, tmp_path):
  (videos / 'broken.avi').write_bytes(b'RIFF\x00\x00\x00\x00AVI LIST' + bytes(200))
  listed = _bad_list(videos, 's1/live_1.avi 1\nbroken.avi 0\n')
  out = tmp_path / 'out'
  with pytest.raises(PadVideoError, match=r'bad.txt:2: .*broken.avi does not decode as a video'):
    pad_frames.extract(listed, str(out), layout='fedgpad', split='train', sampling='all',
                       progress=False)
  assert not out.exists()   # live_1's frames and their folders removed


def test_bad_boxes_and_short_videos_are_named(videos, tmp_path):
  (videos / 'short').mkdir(exist_ok=True)
  write_video(str(videos / 'short/v.avi'), 'short/v.avi', 5, 'ffv1')
  run = lambda listed, **kw: pad_frames.extract(listed, str(tmp_path / 'out'), layout='fedgpad',
                                                split='train', progress=False, **kw)
  with pytest.raises(PadVideoError, match=r"bad.txt:1: .*v.avi decodes to 5 frames; SSDG's "
                     r'sampling keeps frames \[6\]'):
    run(_bad_list(videos, 'short/v.avi 1\n'))
  with pytest.raises(PadVideoError, match=r'short/v.dat: no such box file'):
    run(_bad_list(videos, 'short/v.avi 1\n'), boxes='dat', sampling='all')
  (videos / 'short/v.dat').write_text('1 2 10 10\n1 2 ten 10\n')
  with pytest.raises(PadVideoError, match=r"short/v.dat:2: malformed box '1 2 ten 10'; expected "
                     '4 numbers'):
    run(_bad_list(videos, 'short/v.avi 1\n'), boxes='dat', sampling='all')
  (videos / 'short/v.dat').write_text('1 2 10 10\n')
  with pytest.raises(PadVideoError, match=r'short/v.dat: no face box for frame 1 of short/v.avi'):
    run(_bad_list(videos, 'short/v.avi 1\n'), boxes='dat', sampling='all')
  bad_csv = videos / 'bad.csv'
  bad_csv.write_text('video,frame,x1,y1,x2,y2\n')
  with pytest.raises(PadVideoError, match=r"bad.csv:1: header 'video,frame,x1,y1,x2,y2'; "
                     "expected 'video,frame,x,y,w,h'"):
    run(str(videos / 'videos.txt'), boxes='csv', boxes_csv=str(bad_csv))
  bad_csv.write_text('video,frame,x,y,w,h\ns1/live_1.avi,6,1,1,0,5\n')
  with pytest.raises(PadVideoError, match=r'bad.csv:2: box of size 0x5'):
    run(str(videos / 'videos.txt'), boxes='csv', boxes_csv=str(bad_csv))
  with pytest.raises(ValueError, match=r'layout=mcio keeps frame0 and frame1'):
    pad_frames.extract(str(videos / 'videos.txt'), str(tmp_path / 'm'), layout='mcio',
                       split='test', sampling='ssdg', frames=1)


def test_an_existing_split_is_not_overwritten(videos, tmp_path):
  kw = dict(layout='fedgpad', split='train', sampling='ssdg', frames=1, size=SIZE,
            progress=False)
  pad_frames.extract(str(videos / 'videos.txt'), str(tmp_path / 'r'), **kw)
  with pytest.raises(PadVideoError, match=r'already holds image_list_real.txt'):
    pad_frames.extract(str(videos / 'videos.txt'), str(tmp_path / 'r'), **kw)
  # The other split goes beside it, but never over its frames: a video is in one split.
  with pytest.raises(PadVideoError, match=r'videos.txt:1: .*s1/live_1/00006.png already exists'):
    pad_frames.extract(str(videos / 'videos.txt'), str(tmp_path / 'r'), **{**kw, 'split': 'test'})
  assert (tmp_path / 'r' / 's1/live_1/00006.png').exists()     # the train split's, kept
  pad_frames.extract(_bad_list(videos, 's2/live_2.mov 1\n'), str(tmp_path / 'r'),
                     **{**kw, 'split': 'test', 'sampling': 'every', 'frames': 5})
  assert (tmp_path / 'r' / 'image_list_all.txt').read_text() == (
      's2/live_2/00000.png 1\ns2/live_2/00005.png 1\ns2/live_2/00010.png 1\n'
      's2/live_2/00015.png 1\n')


def test_the_command_line_shows_progress_and_names_a_bad_input_in_one_line(videos, tmp_path):
  flags = [f'--out={tmp_path / "O"}', '--layout=fedgpad', '--split=train', '--size=16']
  out = forked_commands.run_module('fedjax_face.tools.pad_frames',
                                   f'--videos={videos / "videos.txt"}', *flags)
  assert out.returncode == 0, out.stderr
  assert '4/4 videos, 4 frames' in out.stderr
  assert out.stdout.startswith('4 videos -> 4 frames; lists: ')
  bad = forked_commands.run_module('fedjax_face.tools.pad_frames',
                                   f'--videos={_bad_list(videos, "x.avi 3")}', *flags)
  assert bad.returncode == 1
  assert bad.stderr.strip().splitlines() == [
      f"pad_frames: {videos / 'bad.txt'}:1: label '3'; expected 1 (live) or 0 (attack)."]


def test_an_error_after_progress_starts_on_its_own_line(videos, tmp_path):
  # The progress line ends in '\r' updates, not a newline, until the last video: an error part
  # way must end it first, or the message is printed on the progress line.
  (videos / 'broken_late.avi').write_bytes(b'RIFF\x00\x00\x00\x00AVI LIST' + bytes(200))
  listed = videos / 'late.txt'
  listed.write_text('s1/live_1.avi 1\ns1/attack_1.mov 0\nbroken_late.avi 0\n')
  with pytest.raises(PadVideoError) as error:
    pad_frames.extract(str(listed), str(tmp_path / 'quiet'), layout='fedgpad', split='train',
                       size=SIZE, progress=False)
  out = forked_commands.run_module(   # its text as written: '\r' kept as is
      'fedjax_face.tools.pad_frames', f'--videos={listed}', f'--out={tmp_path / "O"}',
      '--layout=fedgpad', '--split=train', f'--size={SIZE}')
  stderr = out.stderr
  assert out.returncode == 1 and out.stdout == ''
  progress, line, end = stderr.split('\n')
  assert progress.endswith('] 2/3 videos, 2 frames'), stderr
  assert progress.count('\r[') == 2, stderr
  assert (line, end) == (f'pad_frames: {error.value}', '')
  assert not (tmp_path / 'O').exists()
