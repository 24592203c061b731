// The expert-parallel all-to-all: per-token hit probabilities, the copies each kernel moves over each link,
// and each phase's time (see all_to_all.hpp). Deterministic: every tie goes to the lower device. Host only.
// Covered by tests/cost/all_to_all_test.cpp.
#include "src/cost/all_to_all.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "src/common/error.hpp"

namespace moesim {
namespace {

// prod_{i < draws} max(0, (pool - held - i) / (pool - i)): the chance that `draws` picks without replacement
// from `pool` items miss all `held` of them (real-valued: shares of a pool).
double miss_probability(double pool, double held, int draws) {
  held = std::min(std::max(held, 0.0), pool);
  double p = 1.0;
  for (int i = 0; i < draws && p > 0; ++i) {
    const double left = pool - static_cast<double>(i);
    if (left <= 0) return 0.0;
    p *= std::max(0.0, (left - held) / left);
  }
  return p;
}

int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }

}  // namespace

A2aHits a2a_hits(const A2aTraffic& t, int per_node) {
  const int D = static_cast<int>(t.device_assignments.size());
  const int M = (D + per_node - 1) / per_node;
  A2aHits h;
  h.device.assign(D, 0.0);
  h.node.assign(M, 0.0);
  if (D == 0) return h;
  if (t.fanout == A2aFanout::spread) {
    // Assignment i of a source goes to device i mod D; token j holds assignments j k .. j k + k - 1. The
    // pattern repeats every D / gcd(D, k) tokens.
    const int k = t.top_k, period = D / gcd(D, k);
    std::vector<int> seen_device(D, -1), seen_node(M, -1);
    for (int j = 0; j < period; ++j) {
      for (int a = 0; a < k; ++a) {
        const int d = static_cast<int>((static_cast<int64_t>(j) * k + a) % D);
        if (seen_device[d] != j) {
          seen_device[d] = j;
          h.device[d] += 1.0 / period;
        }
        if (seen_node[d / per_node] != j) {
          seen_node[d / per_node] = j;
          h.node[d / per_node] += 1.0 / period;
        }
      }
    }
    return h;
  }
  double total = 0;
  for (int64_t a : t.device_assignments) total += static_cast<double>(a);
  if (total <= 0) return h;
  std::vector<double> node_share(M, 0.0);
  for (int d = 0; d < D; ++d) node_share[d / per_node] += static_cast<double>(t.device_assignments[d]) / total;
  const double E = t.num_experts;
  const bool limited = t.node_limit > 0 && t.node_limit < M;
  const double pool = limited ? E * t.node_limit / M : E;
  std::vector<double> chosen(M, 1.0);
  if (limited) {
    for (int n = 0; n < M; ++n) chosen[n] = 1.0 - miss_probability(M, M * node_share[n], t.node_limit);
  }
  for (int n = 0; n < M; ++n) h.node[n] = chosen[n] * (1.0 - miss_probability(pool, E * node_share[n], t.top_k));
  for (int d = 0; d < D; ++d) {
    const double share = static_cast<double>(t.device_assignments[d]) / total;
    h.device[d] = chosen[d / per_node] * (1.0 - miss_probability(pool, E * share, t.top_k));
  }
  return h;
}

A2aCopies a2a_copies(A2aKernel kernel, const A2aTraffic& t, int per_node) {
  const int D = static_cast<int>(t.device_assignments.size());
  const int M = (D + per_node - 1) / per_node;
  A2aCopies c;
  c.scale_up_sent.assign(D, 0.0);
  c.scale_up_received.assign(D, 0.0);
  c.scale_out_sent.assign(D, 0.0);
  c.scale_out_received.assign(D, 0.0);
  if (D <= 1) return c;
  const double per_source = static_cast<double>(t.num_tokens) / D;  // tokens each device starts with
  if (kernel != A2aKernel::normal) {
    // One copy per assignment: source s holds 1 / D of every device's assignments.
    std::vector<double> node_load(M, 0.0);
    double total = 0;
    for (int d = 0; d < D; ++d) {
      node_load[d / per_node] += static_cast<double>(t.device_assignments[d]);
      total += static_cast<double>(t.device_assignments[d]);
    }
    for (int d = 0; d < D; ++d) {
      const int n = d / per_node;
      const double node_size = std::min(per_node, D - n * per_node);
      const double own = static_cast<double>(t.device_assignments[d]);
      c.scale_up_sent[d] = (node_load[n] - own) / D;
      c.scale_out_sent[d] = (total - node_load[n]) / D;
      c.scale_up_received[d] = own * (node_size - 1) / D;
      c.scale_out_received[d] = own * (D - node_size) / D;
    }
    return c;
  }
  const A2aHits h = a2a_hits(t, per_node);
  // Sources per local index (a short last node has fewer).
  std::vector<double> sources_at(per_node, 0.0);
  for (int s = 0; s < D; ++s) sources_at[s % per_node] += 1.0;
  for (int d = 0; d < D; ++d) {
    const int n = d / per_node, local = d % per_node;
    // Scale-up: copies for d from every source of another local index, forwarded by the GPU (n, local(s)).
    c.scale_up_received[d] = h.device[d] * per_source * (D - sources_at[local]);
    // Scale-up sent by d: the tokens of every source of d's local index, to d's node-mates.
    double mates = 0;
    for (int g = n * per_node; g < std::min(D, (n + 1) * per_node); ++g)
      if (g != d) mates += h.device[g];
    c.scale_up_sent[d] = sources_at[local] * per_source * mates;
    if (M > 1) {
      double nodes_hit = 0;
      for (int m = 0; m < M; ++m) nodes_hit += h.node[m];
      c.scale_out_sent[d] = per_source * nodes_hit;
      c.scale_out_received[d] = sources_at[local] * per_source * h.node[n];
    }
  }
  return c;
}

void add_scaled(A2aCost& acc, const A2aCost& x, double f) {
  acc.kernel = x.kernel;
  acc.devices = x.devices;
  acc.nodes = x.nodes;
  acc.devices_per_node = x.devices_per_node;
  for (auto [a, b] : {std::pair<A2aPhase*, const A2aPhase*>{&acc.dispatch, &x.dispatch}, {&acc.combine, &x.combine}}) {
    a->time_s += f * b->time_s;
    a->transfer_s += f * b->transfer_s;
    a->bytes_sent += f * b->bytes_sent;
    a->bytes_received += f * b->bytes_received;
    a->scale_up_s += f * b->scale_up_s;
    a->scale_out_s += f * b->scale_out_s;
  }
  acc.bytes += f * x.bytes;
}

A2aFigures a2a_figures(const HardwareProfile& hw, A2aKernel kernel) {
  A2aFigures f;
  switch (kernel) {
    case A2aKernel::simple: break;
    case A2aKernel::normal:
      f = {hw.a2a_normal_dispatch_s, hw.a2a_normal_combine_s, hw.a2a_normal_scale_up_efficiency,
           hw.a2a_normal_scale_out_efficiency};
      break;
    case A2aKernel::low_latency:
      f = {hw.a2a_low_latency_dispatch_s, hw.a2a_low_latency_combine_s, hw.a2a_low_latency_scale_up_efficiency,
           hw.a2a_low_latency_scale_out_efficiency};
      break;
  }
  return f;
}

int a2a_devices_per_node(const HardwareProfile& hw, int devices) {
  if (hw.link_bandwidth_bytes_per_s <= 0) {
    throw ConfigError(hw.name + ": hardware.link_bandwidth_gbs: expected a positive number for an expert_parallel "
                                "placement over " + std::to_string(devices) + " devices, got nothing");
  }
  const int per_node = hw.devices_per_node > 0 ? std::min(hw.devices_per_node, devices) : devices;
  if (per_node < devices && hw.inter_node_bandwidth_bytes_per_s <= 0) {
    throw ConfigError(hw.name + ": hardware.inter_node_bandwidth_gbs: expected a positive number for " +
                      std::to_string(devices) + " devices over nodes of " + std::to_string(per_node) +
                      " (hardware.devices_per_node), got nothing");
  }
  return per_node;
}

A2aCost a2a_cost_of(const HardwareProfile& hw, A2aKernel kernel, const A2aCopies& c, int per_node,
                    double dispatch_bytes, double combine_bytes, const A2aFigures& f) {
  A2aCost out;
  out.kernel = kernel;
  const int D = static_cast<int>(c.scale_up_sent.size());
  out.devices = D;
  out.devices_per_node = per_node;
  out.nodes = (D + per_node - 1) / per_node;
  if (D <= 1) return out;
  const bool multi_node = out.nodes > 1;
  const double up_bw = hw.link_bandwidth_bytes_per_s * f.scale_up_efficiency;
  const double out_bw = multi_node ? hw.inter_node_bandwidth_bytes_per_s * f.scale_out_efficiency : 0.0;
  double latency = hw.link_latency_s;
  if (multi_node && kernel == A2aKernel::normal) latency += hw.inter_node_latency_s;
  if (multi_node && kernel == A2aKernel::low_latency) latency = std::max(latency, hw.inter_node_latency_s);
  double sent_copies = 0;
  for (int d = 0; d < D; ++d) sent_copies += c.scale_up_sent[d] + c.scale_out_sent[d];
  if (sent_copies <= 0) return out;  // nothing moves: no phase runs
  const auto phase = [&](double bytes, double floor_s) {
    A2aPhase p;
    double best = -1;
    for (int d = 0; d < D; ++d) {
      const double up = std::max(c.scale_up_sent[d], c.scale_up_received[d]) * bytes / up_bw;
      const double across = multi_node ? std::max(c.scale_out_sent[d], c.scale_out_received[d]) * bytes / out_bw : 0;
      p.scale_up_s = std::max(p.scale_up_s, up);
      p.scale_out_s = std::max(p.scale_out_s, across);
      const double slowest = std::max(up, across);
      if (slowest > best) {
        best = slowest;
        p.busiest_device = d;
      }
    }
    p.transfer_s = std::max(0.0, best);
    const int b = p.busiest_device;
    p.bytes_sent = (c.scale_up_sent[b] + c.scale_out_sent[b]) * bytes;
    p.bytes_received = (c.scale_up_received[b] + c.scale_out_received[b]) * bytes;
    p.time_s = floor_s + latency + p.transfer_s;
    return p;
  };
  out.dispatch = phase(dispatch_bytes, f.dispatch_floor_s);
  // Combine sends the dispatched copies back: sent and received swap, and max(sent, received) is the same.
  out.combine = phase(combine_bytes, f.combine_floor_s);
  std::swap(out.combine.bytes_sent, out.combine.bytes_received);
  out.bytes = sent_copies * (dispatch_bytes + combine_bytes);
  return out;
}

A2aCost all_to_all(const HardwareProfile& hw, A2aKernel kernel, const A2aTraffic& t) {
  const int D = static_cast<int>(t.device_assignments.size());
  if (D <= 1) {
    A2aCost out;
    out.kernel = kernel;
    out.devices = D;
    return out;
  }
  const int per_node = a2a_devices_per_node(hw, D);
  return a2a_cost_of(hw, kernel, a2a_copies(kernel, t, per_node), per_node, t.dispatch_bytes, t.combine_bytes,
                     a2a_figures(hw, kernel));
}

}  // namespace moesim
