#!/usr/bin/env python3
"""Key-tile lists of a prefill launch, counted on the host (bench/NOTES.md, sixth session).

For each (query head, 128-row query tile) item of one sequence, lists the visible 64-token
key tiles by the rules of kernels/cuda/key_tile_list.cuh (a tile is listed when any query
block of the item may see its block; it needs the per-token mask unless every query block
sees it and it ends before the item's first row) and pairs them into steps of 128 keys as
the sm90a consumers do (an odd count ends on a padding stage, which takes the masked path).
Prints items, steps, masked steps and a cost with masked steps weighted, with the query
tiles as the kernels place them (aligned_tile_shift in kernels/tile_alignment.hpp) and unshifted.

    python3 bench/tile_model.py [CTX Q ...]     (default: the bench's 32k C=30k and 32768 C=30000)
"""
import sys

HQ, BLOCK, LOCAL, STRIDE, BM = 32, 64, 16, 8, 128  # Phi-3-small, homo_head = 0
MASKED_COST = 0.6  # extra cost of a masked step, in unmasked steps (a rough fit)


def allowed(h, qb, kb):
    return kb <= qb and (qb - kb < LOCAL or (kb + h + 1) % STRIDE == 0)


def aligned_shift(start, length):  # kernels/tile_alignment.hpp
    shift = start % min(BM, BLOCK)
    return shift if (length + shift + BM - 1) // BM == (length + BM - 1) // BM else 0


def count(ctx, q, shift):
    items = steps = masked = 0
    for k in range((q + shift + BM - 1) // BM):
        t0, t1 = max(0, k * BM - shift), min(q, (k + 1) * BM - shift)
        p0, p1 = ctx + t0, ctx + t1 - 1
        for h in range(HQ):
            flags = []
            for kt in range(p1 // 64 + 1):
                kb = kt * 64 // BLOCK
                seen = [allowed(h, qb, kb) for qb in range(p0 // BLOCK, p1 // BLOCK + 1)]
                if any(seen):
                    flags.append(not (all(seen) and kt * 64 + 63 <= p0))
            if len(flags) % 2:
                flags.append(True)
            items += 1
            steps += len(flags) // 2
            masked += sum(flags[i] or flags[i + 1] for i in range(0, len(flags), 2))
    return items, steps, masked


def main():
    args = [int(a) for a in sys.argv[1:]] or [30720, 2048, 30000, 2768]
    for ctx, q in zip(args[::2], args[1::2]):
        for name, shift in (("aligned tiles", aligned_shift(ctx, q)), ("unshifted", 0)):
            items, steps, masked = count(ctx, q, shift)
            print(f"C={ctx} Q={q} {name:13s} (shift {shift:3d}): items {items}, steps {steps}, "
                  f"masked {masked} ({masked / steps:.1%}), weighted {steps + MASKED_COST * masked:.0f}")


if __name__ == "__main__":
    main()
