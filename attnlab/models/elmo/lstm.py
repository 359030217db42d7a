"""ELMo's LSTMs: one direction's layer with a projection and optional clipping, and the two-direction stack
with a residual connection between layers (Peters et al. 2018, section 3.4; Jozefowicz et al. 2016's LSTMP).

`ProjectedLSTM` keeps its weights in ``torch.nn.LSTM``'s layout (gates i, f, g, o; ``weight_hr_l0`` the
projection) and runs on the fused kernel when nothing is clipped. The released models clip the memory cell
and the projected output at 3 after every step, which the fused kernel cannot do: then the same weights run
through a per-step loop (`ProjectedLSTM.loop`, the equations written out). ``bias_hh_l0`` is held at zero
and frozen: one bias per gate, as the released files have (``B``).

The backward direction reads each sentence reversed within its own length (padding stays at the end), so
no packing is needed for stateless use: a forward LSTM's outputs at real positions never see the padding
after them.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

# PyTorch's CPU build says so on every projected LSTM call; the default kernel it falls back to is the one
# used here on purpose, so the notice is noise.
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")

State = tuple[Tensor, Tensor]  # (h (1, B, P), c (1, B, C))


class ProjectedLSTM(nn.Module):
    def __init__(
        self, input_size: int, cell_size: int, proj_size: int,
        cell_clip: float | None = None, proj_clip: float | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.lstm = nn.LSTM(input_size, cell_size, proj_size=proj_size, batch_first=True)
        self.cell_size, self.proj_size = cell_size, proj_size
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        with torch.no_grad():
            self.lstm.bias_hh_l0.zero_()
            self.lstm.bias_ih_l0.zero_()
            self.lstm.bias_ih_l0[cell_size : 2 * cell_size] = (
                1.0  # forget gate starts open (TF's forget_bias)
            )
        self.lstm.bias_hh_l0.requires_grad_(False)

    def forward(self, x: Tensor, mask: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """``x`` (B, T, I), ``mask`` (B, T) bool with the real tokens first -> outputs (B, T, P) and each
        row's state after its last real token."""
        if self.cell_clip is not None or self.proj_clip is not None:
            return self.loop(x, mask, state)
        if state is None:  # stateless: final states are not needed, padding at the end is harmless
            out, (h, c) = self.lstm(x)
            return out, (h, c)
        lengths = mask.sum(dim=1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.lstm(packed, state)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out, (h, c)

    def loop(self, x: Tensor, mask: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """The LSTMP equations one step at a time, clipping c and h; rows past their length keep their
        state."""
        B, T, _ = x.shape
        lstm, C = self.lstm, self.cell_size
        if state is None:
            h = x.new_zeros(B, self.proj_size)
            c = x.new_zeros(B, C)
        else:
            h, c = state[0][0], state[1][0]
        xw = x @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + lstm.bias_hh_l0  # (B, T, 4C)
        outputs = []
        for t in range(T):
            gates = xw[:, t] + h @ lstm.weight_hh_l0.T  # (B, 4C): i, f, g, o
            i, f, g, o = gates.split(C, dim=-1)
            c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            if self.cell_clip is not None:
                c_new = c_new.clamp(-self.cell_clip, self.cell_clip)
            h_new = (torch.sigmoid(o) * torch.tanh(c_new)) @ lstm.weight_hr_l0.T  # (B, P)
            if self.proj_clip is not None:
                h_new = h_new.clamp(-self.proj_clip, self.proj_clip)
            keep = mask[:, t : t + 1]
            h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
            outputs.append(h_new)
        return torch.stack(outputs, dim=1), (h.unsqueeze(0), c.unsqueeze(0))


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Each row of ``x`` (B, T, ...) reversed within its first ``lengths[b]`` positions; padding stays
    where it is. Its own inverse."""
    B, T = x.shape[:2]
    t = torch.arange(T, device=x.device).unsqueeze(0)  # (1, T)
    n = lengths.to(x.device).unsqueeze(1)  # (B, 1)
    index = torch.where(t < n, n - 1 - t, t)  # (B, T)
    return x.gather(1, index.view(B, T, *([1] * (x.dim() - 2))).expand_as(x))


class BiLSTMStack(nn.Module):
    """``num_layers`` forward and backward `ProjectedLSTM` layers, each direction on its own, a residual
    connection from the second layer on. Returns every layer's (B, T, 2P) output (forward half first).

    ``stateful``: each layer's final states are kept and start the next batch (row b continues row b), for
    long documents read in pieces; off by default so that a sentence gets the same vectors in any batch.
    """

    def __init__(
        self, input_size: int, cell_size: int, proj_size: int, num_layers: int, residual: bool = True,
        cell_clip: float | None = None, proj_clip: float | None = None, dropout: float = 0.0,
    ) -> None:  # fmt: skip
        super().__init__()
        sizes = [input_size] + [proj_size] * (num_layers - 1)
        self.forward_layers = nn.ModuleList(
            ProjectedLSTM(n, cell_size, proj_size, cell_clip, proj_clip) for n in sizes
        )
        self.backward_layers = nn.ModuleList(
            ProjectedLSTM(n, cell_size, proj_size, cell_clip, proj_clip) for n in sizes
        )
        self.residual = residual
        self.dropout = nn.Dropout(dropout)
        self.stateful = False
        self._states: dict[tuple[int, int], State] = {}

    def reset_states(self) -> None:
        self._states = {}

    def _initial(self, key: tuple[int, int], batch: int) -> State | None:
        if not self.stateful or key not in self._states:
            return None
        h, c = self._states[key]
        if h.shape[1] != batch:  # a smaller or larger batch: keep the first rows, start new rows at zero
            n = min(batch, h.shape[1])
            h2, c2 = h.new_zeros(1, batch, h.shape[2]), c.new_zeros(1, batch, c.shape[2])
            h2[:, :n], c2[:, :n] = h[:, :n], c[:, :n]
            h, c = h2, c2
        return h, c

    def forward(self, x: Tensor, mask: Tensor) -> list[Tensor]:
        """``x`` (B, T, I) token vectors, ``mask`` (B, T) -> num_layers tensors (B, T, 2P)."""
        B = x.shape[0]
        lengths = mask.sum(dim=1)
        reversed_mask = reverse_padded(mask, lengths)  # the same: real tokens first
        outputs = []
        fwd_in, bwd_in = x, reverse_padded(x, lengths)
        for k, (fwd, bwd) in enumerate(zip(self.forward_layers, self.backward_layers)):
            init_f, init_b = self._initial((0, k), B), self._initial((1, k), B)
            if self.stateful and init_f is None:
                init_f = init_b = "zeros"  # packed run: final states at each row's own end
            f_out, f_state = fwd(self.dropout(fwd_in), mask, _zeros_if(init_f, fwd, B, x))
            b_out, b_state = bwd(self.dropout(bwd_in), reversed_mask, _zeros_if(init_b, bwd, B, x))
            if self.stateful:
                self._states[(0, k)] = (f_state[0].detach(), f_state[1].detach())
                self._states[(1, k)] = (b_state[0].detach(), b_state[1].detach())
            if self.residual and k > 0:
                f_out, b_out = f_out + fwd_in, b_out + bwd_in
            outputs.append(torch.cat([f_out, reverse_padded(b_out, lengths)], dim=-1))  # (B, T, 2P)
            fwd_in, bwd_in = f_out, b_out
        return outputs


def _zeros_if(state: State | str | None, layer: ProjectedLSTM, batch: int, like: Tensor) -> State | None:
    if state != "zeros":
        return state  # type: ignore[return-value]
    return (like.new_zeros(1, batch, layer.proj_size), like.new_zeros(1, batch, layer.cell_size))
