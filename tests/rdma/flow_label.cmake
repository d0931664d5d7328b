# Flow labels on the wire (issue 24), one VM: tcpdump on the link between the test ports while
# plugin_rdma_test moves every size over 4 QPs per connection, with SLUICE_FLOW_LABEL=auto, a seed,
# and off; every packet's UDP source port must be the one predicted from the connection's logged
# labels (off: the kernel's QPN hash), distinct and evenly spaced per connection
# (tests/rdma/flow_label_bed.sh, tests/rdma/flow_label_check.py).
sluice_add_rdma_test(NAME plugin_flow_labels TIMEOUT 600
                     COMMAND ${CMAKE_CURRENT_LIST_DIR}/flow_label_bed.sh $<TARGET_FILE:plugin_rdma_test>)
