#!/usr/bin/env bash
# Device call 4 of session 6: end-to-end section with q allocated first (A, main) and scales first (B), alternating,
# each run from a scratch directory so that PYTHONPATH picks the library.
set -u
export PYTHONUNBUFFERED=1
bash .devdeps/install-deepgemm.sh > $OUT/deepgemm-install.log 2>&1 || exit 1
root=$PWD; run=$(mktemp -d); cd $run
for v in A B; do
  if [ $v = A ]; then pp=$root; else pp=$root/.exp/swap; fi
  PYTHONPATH=$pp python3 -c "
import torch, fp8ops
x = torch.randn(1, 7168, dtype=torch.bfloat16, device='cuda')
q, s = fp8ops.per_token_group_quant(x, 128, 'col_tma')
print('$v', fp8ops._LIBRARY, 's - q =', s.data_ptr() - q.data_ptr())"
done
for i in 1 2; do
  for v in A B; do
    if [ $v = A ]; then pp=$root; else pp=$root/.exp/swap; fi
    echo "== $v pass $i"
    PYTHONPATH=$pp timeout 150 python3 -m fp8ops.bench --sections e2e --json $OUT/e2e-$v$i.json 2>&1 | grep "e2e M=\|copy bandwidth\|Error\|error"
  done
done
