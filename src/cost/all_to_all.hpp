// The expert-parallel all-to-all (docs/cost-model.md "The all-to-all"): the copies each device sends and
// receives over the scale-up link (NVLink, within a node) and the scale-out NIC (RDMA, across nodes) for one
// dispatch and one combine, as each kernel moves them, and the time of each phase on a hardware profile.
// Inputs: the assignments each device processes [devices] and the batch's shape; outputs: A2aCost. Pure
// arithmetic, deterministic, host only, no allocation beyond the per-device vectors.
// Covered by tests/cost/all_to_all_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"

namespace moesim {

// How a token's k assignments spread over the devices, which sets the copies of the kernels that send a
// token once per destination (normal):
//  random - each token's k experts drawn without replacement in proportion to the loads (the uniform random
//           routing of DeepEP's and NCCL EP's tests; what moesim assumes of a routing it knows by its loads);
//  spread - the k assignments of a token on min(k, D) distinct devices, assignment i of a source on device
//           i mod D (TensorRT-LLM's perfect router, create_renormalize_expert_load_balanced_logits): balanced.
enum class A2aFanout { random, spread };

// The traffic one all-to-all moves: the batch as it sits on the devices and where its assignments go.
struct A2aTraffic {
  std::vector<int64_t> device_assignments;  // [devices] assignments each device processes (its experts' rows)
  int64_t num_tokens = 0;   // N, spread evenly over the devices (data-parallel attention): N / D each
  int top_k = 1;            // k
  int num_experts = 1;      // E, the logical experts a token picks k of
  // Nodes a token's experts may span (group-limited routing with its groups on nodes: router.topk_groups);
  // 0 = no limit.
  int node_limit = 0;
  A2aFanout fanout = A2aFanout::random;
  double dispatch_bytes = 0, combine_bytes = 0;  // bytes of one copy (a2a_copy_bytes)
};

// Per-token hit probabilities under the fan-out (exposed for the tests): h_device[d] = P(a token has an
// expert on device d), h_node[n] = P(a token has an expert on node n), nodes of `per_node` devices.
//  random, node limit L < M nodes: P(node n among the token's L) = 1 - prod_{i<L} (M - M b_n - i) / (M - i),
//    b_n = the node's share of the assignments; given it, the k experts are drawn from the chosen nodes'
//    E_L = E L / M experts, of which node n holds min(E_L, E b_n) (device d: E a_d):
//    h = P(chosen) (1 - prod_{i<k} (E_L - e - i) / (E_L - i)), each factor clamped at 0; L >= M: P 1, E_L = E.
//    Uniform loads give the hypergeometric probabilities exactly.
//  spread: exact over one period of the round-robin pattern.
struct A2aHits {
  std::vector<double> device, node;
};
A2aHits a2a_hits(const A2aTraffic& t, int per_node);

// Copies one phase moves, per device (dispatch; combine sends the same copies back, sent and received
// swapped): scale_up_* over the scale-up link, scale_out_* over the NIC.
//  simple, low_latency: one copy per (token, selected expert) on another device: device s sends
//    sum_{d != s} A_d / D (A_d = assignments of device d; each source holds 1 / D of every expert's tokens),
//    within its node over scale-up, to other nodes over scale-out (simple: every device in one domain when
//    the profile has no devices_per_node).
//  normal: one copy per (token, destination node) over scale-out, to the GPU of the source's local index,
//    the source's own node included (DeepEP's internode kernels stage every token through their RDMA
//    buffers; tests/test_internode.py counts num_rdma_token_sent so, and the published rates hold steady over
//    EP 16-64 only when counted so); then one copy per (token, destination GPU) over scale-up from that GPU,
//    when it is not the destination: N / D h_d from every source of another local index. One node: one
//    copy per (token, destination GPU other than the source) over scale-up (TensorRT-LLM's one-sided kernel).
struct A2aCopies {
  std::vector<double> scale_up_sent, scale_up_received, scale_out_sent, scale_out_received;  // [devices]
};
A2aCopies a2a_copies(A2aKernel kernel, const A2aTraffic& t, int per_node);

// One phase's modeled time and who sets it.
struct A2aPhase {
  double time_s = 0;        // floor + latency + transfer (quantized column)
  double transfer_s = 0;    // the busiest device's slowest link: max(sent, received) x bytes / achieved bandwidth
  int busiest_device = 0;   // the device whose link sets transfer_s (the lower index on a tie)
  double bytes_sent = 0, bytes_received = 0;  // that device's, over both links
  double scale_up_s = 0, scale_out_s = 0;     // the busiest device on each link
};

struct A2aCost {
  A2aKernel kernel = A2aKernel::simple;
  int devices = 1, nodes = 1, devices_per_node = 1;
  A2aPhase dispatch, combine;
  double bytes = 0;           // dispatch + combine bytes that leave their device, every device
  double time_s() const { return dispatch.time_s + combine.time_s; }
  double ideal_s() const { return dispatch.transfer_s + combine.transfer_s; }  // no floor, no latency
};

// acc += f x every time and byte of x (means over records); the kernel and the shape are x's, the busiest
// devices acc's own.
void add_scaled(A2aCost& acc, const A2aCost& x, double f);

// The figures of `kernel` on `hw`: floors per phase and the achieved fraction of each link (simple: 0 floors,
// full bandwidth, the link latency per phase: moesim's first model).
struct A2aFigures {
  double dispatch_floor_s = 0, combine_floor_s = 0;
  double scale_up_efficiency = 1, scale_out_efficiency = 1;
};
A2aFigures a2a_figures(const HardwareProfile& hw, A2aKernel kernel);

// The devices of one scale-up domain for a placement over `devices` (hw.devices_per_node, or every device
// when the profile sets none), and whether the profile can carry it: throws ConfigError naming
// hardware.link_bandwidth_gbs (no link) or hardware.inter_node_bandwidth_gbs (nodes without a NIC).
int a2a_devices_per_node(const HardwareProfile& hw, int devices);

// The phases of one all-to-all from its copies (a2a_copies over a2a_devices_per_node's nodes) with the given
// figures: what all_to_all computes after the copies (validation refits the figures on fixed copies).
A2aCost a2a_cost_of(const HardwareProfile& hw, A2aKernel kernel, const A2aCopies& copies, int per_node,
                    double dispatch_bytes, double combine_bytes, const A2aFigures& figures);

// Each phase = the kernel's floor + latency (scale-up link latency, plus one scale-out hop across nodes for
// normal; the larger of the two for low_latency; simple: the link latency) + the transfer of its busiest
// device: max over links and devices of max(sent, received) x bytes / (bandwidth x efficiency). Zero when
// nothing moves or one device. Throws ConfigError as a2a_devices_per_node.
A2aCost all_to_all(const HardwareProfile& hw, A2aKernel kernel, const A2aTraffic& t);

}  // namespace moesim
