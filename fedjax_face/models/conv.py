"""Convolutions that XLA CPU runs fast: a kernel gradient fast inside loops, and a thin-input
layer on padded channels.

XLA CPU computes a convolution's kernel gradient as a convolution in a non-canonical layout (input
channels as the batch). Unrolled, layout assignment rewrites it into a fast kernel; inside a while
loop (`lax.scan` over local steps, `lax.map` over client chunks) the loop's fixed layouts keep it on
a slow path, many times slower than unrolled (BUILD_NOTES.md, "Known XLA quirks", has the
measurements with and without `canonical_gradient_conv`).

`canonical_gradient_conv` is `lax.conv_general_dilated` with a custom VJP that states both
gradients as ordinary NHWC/HWIO convolutions (the transposes made explicit), which XLA runs on its
fast path anywhere. The mathematics is the same convolution: the tests compare both gradients to
XLA's own. Cases it does not cover (dilations, grouped convolutions, other layouts) fall back to
`lax.conv_general_dilated`.

`chunked_gradient_conv` is `lax.conv_general_dilated` with XLA's own gradients, except that the
kernel gradient is summed over chunks of `KERNEL_GRADIENT_CHUNK` images: one product contracting
over every image and position runs on a slow path of XLA CPU, several shorter ones do not; and a
strided NHWC convolution's input gradient is one stride-1 convolution per output phase
(`phase_input_gradient`), not XLA's convolution of the stride-dilated cotangent (BUILD_NOTES.md,
"A backbone's training step against PyTorch"). Both sum in another order, so gradients equal
XLA's to float rounding, not bit for bit.

`channel_padded(conv)` runs a layer's forward on input channels padded to a multiple (an RGB
layer on 4 channels, where XLA CPU's kernels are much faster) and returns the unpadded
convolution's gradients (a custom VJP); BUILD_NOTES.md, "Client step on XLA CPU", measures it.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

CONV_GRADIENTS = ('xla', 'canonical', 'chunked')
KERNEL_GRADIENT_CHUNK = 8   # images a kernel-gradient product contracts over (measured, batch 64)
_NHWC = ('NHWC', 'HWIO', 'NHWC')


def _ungrouped_nhwc(lhs, rhs, dimension_numbers, feature_group_count, batch_group_count) -> bool:
  """Whether a convolution is 2-D NHWC/HWIO with no feature or batch groups: the form this
  module's custom gradients and padding restate."""
  return (lhs.ndim == 4 and feature_group_count == 1 and batch_group_count == 1
          and lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
          == lax.conv_dimension_numbers(lhs.shape, rhs.shape, _NHWC))


def _undilated(lhs_dilation, rhs_dilation) -> bool:
  return all(d in (None, 1) for d in tuple(lhs_dilation or ()) + tuple(rhs_dilation or ()))


def _pads(padding, in_spatial, kernel_spatial, strides):
  if isinstance(padding, str):
    return tuple(lax.padtype_to_pads(in_spatial, kernel_spatial, strides, padding))
  return tuple((int(lo), int(hi)) for lo, hi in padding)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _conv(x, kernel, strides, pads, precision):
  return lax.conv_general_dilated(x, kernel, strides, pads, dimension_numbers=_NHWC,
                                  precision=precision)


def _conv_fwd(x, kernel, strides, pads, precision):
  return _conv(x, kernel, strides, pads, precision), (x, kernel)


def _conv_bwd(strides, pads, precision, residuals, g):
  x, kernel = residuals
  kh, kw = kernel.shape[:2]
  # Kernel gradient: correlate x with g over the batch. As a plain conv: x's input channels are
  # the batch ([Cin, H, W, N]), g is the kernel ([Ho, Wo, N, Cout]) dilated by the stride, and the
  # output [Cin, >=kh, >=kw, Cout] holds the kernel gradient in its first kh x kw positions.
  dk = lax.conv_general_dilated(
      x.transpose(3, 1, 2, 0), g.transpose(1, 2, 0, 3), (1, 1), pads, rhs_dilation=strides,
      dimension_numbers=_NHWC, precision=precision)
  dk = dk[:, :kh, :kw, :].transpose(1, 2, 0, 3).astype(kernel.dtype)
  # Input gradient: the transposed conv, i.e. g dilated by the stride, convolved with the
  # spatially flipped kernel whose input and output channels are swapped.
  dx_pads = []
  for size, k, stride, (lo, _), out in zip(x.shape[1:3], (kh, kw), strides, pads, g.shape[1:3]):
    lo_t = k - 1 - lo
    dx_pads.append((lo_t, size + k - 1 - ((out - 1) * stride + 1) - lo_t))
  dx = lax.conv_general_dilated(
      g, jnp.flip(kernel, (0, 1)).transpose(0, 1, 3, 2), (1, 1), dx_pads, lhs_dilation=strides,
      dimension_numbers=_NHWC, precision=precision).astype(x.dtype)
  return dx, dk


_conv.defvjp(_conv_fwd, _conv_bwd)


def canonical_gradient_conv(lhs, rhs, window_strides, padding, lhs_dilation=None,
                            rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                            batch_group_count=1, precision=None, preferred_element_type=None):
  """`lax.conv_general_dilated` (same signature) with loop-friendly gradients for 2-D NHWC/HWIO."""
  plain = (_ungrouped_nhwc(lhs, rhs, dimension_numbers, feature_group_count, batch_group_count)
           and preferred_element_type is None and _undilated(lhs_dilation, rhs_dilation))
  if not plain:
    return lax.conv_general_dilated(
        lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers, feature_group_count=feature_group_count,
        batch_group_count=batch_group_count, precision=precision,
        preferred_element_type=preferred_element_type)
  strides = tuple(int(s) for s in window_strides)
  pads = _pads(padding, lhs.shape[1:3], rhs.shape[:2], strides)
  return _conv(lhs, rhs, strides, pads, precision)


def _phase_taps(size: int, stride: int, phase: int, pad_lo: int) -> tuple[list[int], int]:
  """The kernel taps k that reach input positions `stride * t + phase`, in ascending order of
  the output offset d = (phase + pad_lo - k) / stride they read (t + d), and the first offset."""
  taps = [k for k in reversed(range(size)) if (phase + pad_lo - k) % stride == 0]
  return taps, ((phase + pad_lo - taps[0]) // stride if taps else 0)


def phase_input_gradient(g, kernel, input_shape, strides, pads):
  """The input gradient of a strided NHWC/HWIO convolution, one stride-1 convolution per output
  phase: input position `s * t + a` gets `sum_k g[t + d_k] kernel[k]^T` over the taps k with
  `(a + pad_lo - k) % s == 0` (`d_k` as `_phase_taps`), read from `g` padded or cropped by
  `lax.pad`; the phases are interleaved back. XLA CPU states this gradient as one convolution of
  `g` dilated by the stride, which Eigen runs slowly (BUILD_NOTES.md, "A backbone's training step
  against PyTorch"). Needs each input size a multiple of its stride."""
  n, height, width, cin = input_shape
  (sh, sw), ((plh, _), (plw, _)) = strides, pads
  out_h, out_w = height // sh, width // sw
  rows = []
  for a in range(sh):
    row = []
    for b in range(sw):
      taps_h, first_h = _phase_taps(kernel.shape[0], sh, a, plh)
      taps_w, first_w = _phase_taps(kernel.shape[1], sw, b, plw)
      if not taps_h or not taps_w:
        row.append(jnp.zeros((n, out_h, out_w, cin), g.dtype))
        continue
      sub = kernel[jnp.asarray(taps_h)][:, jnp.asarray(taps_w)].transpose(0, 1, 3, 2)
      window = [(-first, out + first + len(taps) - 1 - size, 0) for first, taps, out, size in
                ((first_h, taps_h, out_h, g.shape[1]), (first_w, taps_w, out_w, g.shape[2]))]
      padded = lax.pad(g, jnp.zeros((), g.dtype), [(0, 0, 0), *window, (0, 0, 0)])
      row.append(lax.conv_general_dilated(padded, sub, (1, 1), 'VALID', dimension_numbers=_NHWC))
    rows.append(jnp.stack(row, axis=3))        # [n, out_h, out_w, sw, cin]
  return jnp.stack(rows, axis=2).reshape(input_shape)   # from [n, out_h, sh, out_w, sw, cin]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _chunked(x, kernel, conv, phases):
  return conv(x, kernel)


def _chunked_fwd(x, kernel, conv, phases):
  return conv(x, kernel), (x, kernel)


def _chunked_bwd(conv, phases, residuals, g):
  x, kernel = residuals
  # Each vjp also traces its forward conv; nothing reads it, so jit drops it.
  if phases is None:
    dx = jax.vjp(lambda x: conv(x, kernel), x)[1](g)[0]
  else:
    dx = phase_input_gradient(g, kernel, x.shape, *phases).astype(x.dtype)
  starts = range(0, x.shape[0], KERNEL_GRADIENT_CHUNK)
  dk = sum(jax.vjp(lambda k, i=i: conv(x[i:i + KERNEL_GRADIENT_CHUNK], k), kernel)[1](
      g[i:i + KERNEL_GRADIENT_CHUNK])[0] for i in starts)
  return dx, dk


_chunked.defvjp(_chunked_fwd, _chunked_bwd)


def chunked_gradient_conv(lhs, rhs, window_strides, padding, lhs_dilation=None,
                          rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                          batch_group_count=1, precision=None, preferred_element_type=None):
  """`lax.conv_general_dilated` (same signature) whose kernel gradient is summed over chunks of
  `KERNEL_GRADIENT_CHUNK` images and whose input gradient, for a strided NHWC convolution of
  input sizes divisible by the strides, is taken per output phase (a batch no larger than one
  chunk keeps XLA's own gradients)."""
  plain = functools.partial(
      lax.conv_general_dilated, window_strides=window_strides, padding=padding,
      lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
      feature_group_count=feature_group_count, batch_group_count=batch_group_count,
      precision=precision, preferred_element_type=preferred_element_type)
  batch_dim = lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers).lhs_spec[0]
  if batch_dim != 0 or batch_group_count != 1 or lhs.shape[0] <= KERNEL_GRADIENT_CHUNK:
    return plain(lhs, rhs)
  strides = tuple(int(s) for s in window_strides)
  by_phase = (max(strides) > 1 and _undilated(lhs_dilation, rhs_dilation)
              and _ungrouped_nhwc(lhs, rhs, dimension_numbers, feature_group_count,
                                  batch_group_count)
              and all(size % stride == 0 for size, stride in zip(lhs.shape[1:3], strides)))
  phases = (strides, _pads(padding, lhs.shape[1:3], rhs.shape[:2], strides)) if by_phase else None
  return _chunked(lhs, rhs, plain, phases)


def conv_function(gradient: str):
  """The conv for `nn.Conv(conv_general_dilated=...)`: 'xla' (XLA's own gradient), 'canonical'
  or 'chunked'."""
  if gradient not in CONV_GRADIENTS:
    raise ValueError(f'conv gradient {gradient!r} is not one of {CONV_GRADIENTS}')
  return {'canonical': canonical_gradient_conv,
          'chunked': chunked_gradient_conv}.get(gradient, lax.conv_general_dilated)


# XLA CPU's convolution kernels are several times faster when the input channels are a multiple of
# 4 (BUILD_NOTES.md, "Client step on XLA CPU": the 3-channel first layer of a small CNN).
CHANNEL_MULTIPLE = 4


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _channel_padded(x, kernel, conv, multiple):
  extra = -x.shape[-1] % multiple
  return conv(jnp.pad(x, ((0, 0),) * 3 + ((0, extra),)),
              jnp.pad(kernel, ((0, 0),) * 2 + ((0, extra), (0, 0))))


def _channel_padded_fwd(x, kernel, conv, multiple):
  return _channel_padded(x, kernel, conv, multiple), (x, kernel)


def _channel_padded_bwd(conv, multiple, residuals, g):
  del multiple
  x, kernel = residuals
  return jax.vjp(conv, x, kernel)[1](g)   # the unpadded conv's gradients (no zero rows to drop)


_channel_padded.defvjp(_channel_padded_fwd, _channel_padded_bwd)


def channel_padded(conv_general_dilated):
  """`conv_general_dilated` (either of `conv_function`'s) whose forward pass runs on input
  channels zero-padded to a multiple of `CHANNEL_MULTIPLE`, for NHWC/HWIO convolutions of few
  input channels (an RGB first layer). The padded channels multiply zero weights, so the outputs
  equal the unpadded conv's up to float rounding (the kernel sums in another order); gradients are
  the unpadded conv's own (a custom VJP), so no zero rows are computed or trained."""

  def conv(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
           dimension_numbers=None, feature_group_count=1, batch_group_count=1, precision=None,
           preferred_element_type=None):
    plain = functools.partial(
        conv_general_dilated, window_strides=window_strides, padding=padding,
        lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers, feature_group_count=feature_group_count,
        batch_group_count=batch_group_count, precision=precision,
        preferred_element_type=preferred_element_type)
    nhwc = _ungrouped_nhwc(lhs, rhs, dimension_numbers, feature_group_count, batch_group_count)
    if not nhwc or lhs.shape[-1] % CHANNEL_MULTIPLE == 0:
      return plain(lhs, rhs)
    return _channel_padded(lhs, rhs, plain, CHANNEL_MULTIPLE)

  return conv
