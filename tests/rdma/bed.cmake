# Smoke tests of the Soft-RoCE test bed itself (scripts/rdma-bed, docs/test-bed.md). Label `rdma`.
# They need no compiled code: only rdma-core's ibv_rc_pingpong and rdmacm-utils' rping.
#
# Note: add_test() stores COMMAND as a CMake list, so the shell scripts below use newlines, `&&` and
# `||` instead of `;`, and must not contain `${`.

# ibv_rc_pingpong rxe0 (server, background) <-> rxe1 (client) over GID index 0 in one bed.
# Fails if either side fails.
sluice_add_rdma_test(NAME bed_rc_pingpong TIMEOUT 300 COMMAND sh -c
"ibv_rc_pingpong -d rxe0 -g 0 -n 100 &
srv=$!
n=0
until ss -Hltn 2>/dev/null | grep -q ':18515 '
do
  n=$((n + 1))
  if [ $n -gt 200 ] || ! kill -0 $srv 2>/dev/null
  then
    echo 'bed_rc_pingpong: server did not start listening' >&2
    kill $srv 2>/dev/null
    exit 1
  fi
  sleep 0.05
done
ibv_rc_pingpong -d rxe1 -g 0 -n 100 localhost
cli=$?
wait $srv
srv_rc=$?
echo \"bed_rc_pingpong: client exit $cli, server exit $srv_rc\"
[ $cli -eq 0 ] && [ $srv_rc -eq 0 ]")

# rping (rdma_cm) between two VMs on the UDP link: host1 (client) -> host0 (server), 3 iterations.
# The client retries until the server listens; the bed fails if either side fails.
add_test(NAME bed_two_host_rping
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --two-host --timeout 280 --
    "rping -s -a 169.254.0.1 -C 3 -v"
    "n=0
until rping -c -a 169.254.0.1 -C 3 -v
do
  n=$((n + 1))
  [ $n -lt 50 ] || exit 1
  sleep 0.2
done")
set_tests_properties(bed_two_host_rping PROPERTIES LABELS rdma TIMEOUT 300
                     SKIP_RETURN_CODE 77)   # 77: nested inside a VM bed, cannot boot VMs there
