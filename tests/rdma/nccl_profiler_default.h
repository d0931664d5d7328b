// NCCL's profiler callback and proxy-step handles as the two-host tests give them to the plugin
// (issue 31; docs/profiler.md has the contract). From net v10 on NCCL passes ncclProfilerCallback
// to every init, with or without a profiler plugin loaded (src/plugin/net.cc), and every isend /
// irecv of its proxy gets the handle of its step, &sub->pHandles[step % NCCL_STEPS]: never NULL
// in the proxy's data path (src/transport/net.cc). A test that passes neither leaves the plugin's
// profiler branch unrun, which is how a replay that crashed in it went unseen. Modes:
//  * kDefault, NCCL with no profiler plugin loaded: the callback returns ncclSuccess and does
//    nothing else (src/plugin/profiler.cc tests `ncclProfiler != NULL` first), so *eHandle stays
//    as the plugin left it; the calls are only counted. isend / irecv get a step handle each.
//  * kLoaded, a profiler plugin loaded whose activation mask has ncclProfileNetPlugin: a start
//    returns a real event handle (never NULL), a stop ends it, and the contract is checked as
//    such a profiler meets it: a start names a step handle this test gave to a post that was not
//    yet reported done, with NET/IB's plugin id and a descriptor; a stop names a live handle, once;
//    when test reports a request done no event is open under its step handles; once the comms are
//    closed every event is stopped. Handles are looked up, never dereferenced unchecked.
//  * kOff: no callback, NULL handles (as before issue 31).
// SLUICE_TEST_PROFILER=off|default|loaded overrides a test's mode. Each step handle is used for one
// request only (NCCL reuses its NCCL_STEPS slots once their request is done; a fresh one per
// request makes a start under a finished request's handle visible). One state per process: the
// callback has no context argument, as NCCL's has none.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "net_harness.h"

namespace nettest::nccl_profiler {

enum class Mode { kOff, kDefault, kLoaded };

inline const char* mode_name(Mode m) {
  return m == Mode::kOff ? "off" : m == Mode::kDefault ? "default" : "loaded";
}

// The test's mode unless SLUICE_TEST_PROFILER names another.
inline Mode mode_from_env(Mode dflt) {
  const char* v = std::getenv("SLUICE_TEST_PROFILER");
  if (v == nullptr || *v == '\0') return dflt;
  const std::string s = v;
  if (s == "off") return Mode::kOff;
  if (s == "default") return Mode::kDefault;
  if (s == "loaded") return Mode::kLoaded;
  std::fprintf(stderr, "SLUICE_TEST_PROFILER=%s: not off, default or loaded; using %s\n", v,
               mode_name(dflt));
  return dflt;
}

// What NCCL's pHandle points to (struct ncclProxyEventHandle {stepEventHandle, subArgPtr}); here
// the step's state.
struct Step {
  enum State { kGiven, kPosted, kDone };
  State state = kGiven;
  int open = 0;  // events started under it and not stopped
};

struct Event {
  Step* parent = nullptr;
  bool stopped = false;
};

struct Counts {
  long long starts = 0, stops = 0, updates = 0;
  long long steps = 0;  // step handles given to posts that took them
  // kLoaded: contract breaches (each also described once in `first`).
  long long bad_start = 0;     // NULL eHandle or pHandle, a pHandle this test never gave, a foreign
                               // plugin id or no descriptor
  long long late_start = 0;    // under a step whose request test already reported done
  long long bad_stop = 0;      // of a handle no start returned, or one already stopped
  long long open_at_done = 0;  // requests reported done with events still open under their steps
  long long breaches() const { return bad_start + late_start + bad_stop + open_at_done; }
};

class State : public StepHandles {
 public:
  Mode mode = Mode::kOff;

  void* send_handle(void* comm) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto& g = given_[{comm, true}];
    if (g.empty()) g.push_back(new_step());
    return g[0];
  }
  void** recv_handles(void* comm, int n) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto& g = given_[{comm, false}];
    while (static_cast<int>(g.size()) < n) g.push_back(new_step());
    std::vector<void*>& arr = arrays_[{comm, false}];
    arr.assign(g.begin(), g.begin() + n);
    return arr.data();
  }
  void posted(void* comm, bool send, void* req, int n) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto& g = given_[{comm, send}];
    std::vector<Step*>& mine = by_req_[req];
    mine.clear();
    for (int i = 0; i < n && !g.empty(); ++i) {
      g.front()->state = Step::kPosted;
      mine.push_back(g.front());
      g.pop_front();
      ++counts_.steps;
    }
  }
  void done(void* req) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = by_req_.find(req);
    if (it == by_req_.end()) return;
    int open = 0;
    for (Step* s : it->second) {
      s->state = Step::kDone;
      open += s->open;
    }
    by_req_.erase(it);
    if (mode == Mode::kLoaded && open > 0) {
      ++counts_.open_at_done;
      note("test reported a request done with " + std::to_string(open) +
           " event(s) still open under its step handle(s)");
    }
  }

  ncclResult_t callback(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData) {
    std::lock_guard<std::mutex> lk(mu_);
    if (type == ncclProfilerNetEventStart) {
      ++counts_.starts;
      if (mode != Mode::kLoaded) return ncclSuccess;  // NCCL with no profiler: nothing
      auto* s = static_cast<Step*>(pHandle);
      if (eHandle == nullptr || pHandle == nullptr || steps_.count(s) == 0) {
        ++counts_.bad_start;
        note(eHandle == nullptr   ? "a start with a NULL eHandle"
             : pHandle == nullptr ? "a start with a NULL pHandle (NCCL dereferences it)"
                                  : "a start under a pHandle this test never gave");
        return ncclSuccess;
      }
      if (pluginId != (NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER) ||
          extData == nullptr) {
        ++counts_.bad_start;
        note("a start with plugin id " + std::to_string(pluginId) +
             (extData == nullptr ? " and no descriptor" : ""));
        return ncclSuccess;
      }
      if (s->state == Step::kDone) {
        ++counts_.late_start;
        note("a start under the step handle of a request test already reported done");
      }
      events_.push_back({s, false});
      Event* e = &events_.back();
      live_.insert(e);
      ++s->open;
      *eHandle = e;
    } else if (type == ncclProfilerNetEventStop) {
      ++counts_.stops;
      if (mode != Mode::kLoaded) return ncclSuccess;
      auto* e = eHandle != nullptr ? static_cast<Event*>(*eHandle) : nullptr;
      if (e == nullptr || live_.count(e) == 0) {
        ++counts_.bad_stop;
        note(e != nullptr && known(e) ? "a stop of an event already stopped"
                                      : "a stop of a handle no start returned");
        return ncclSuccess;
      }
      live_.erase(e);
      e->stopped = true;
      --e->parent->open;
    } else {
      ++counts_.updates;
    }
    return ncclSuccess;
  }

  Counts counts() const {
    std::lock_guard<std::mutex> lk(mu_);
    return counts_;
  }
  long long open_events() const {
    std::lock_guard<std::mutex> lk(mu_);
    return static_cast<long long>(live_.size());
  }
  std::string first_breach() const {
    std::lock_guard<std::mutex> lk(mu_);
    return first_;
  }

 private:
  Step* new_step() {
    steps_store_.emplace_back();
    Step* s = &steps_store_.back();
    steps_.insert(s);
    return s;
  }
  bool known(const Event* e) const {
    for (const Event& x : events_)
      if (&x == e) return true;
    return false;
  }
  void note(const std::string& what) {
    if (first_.empty()) first_ = what;
  }
  struct KeyHash {
    size_t operator()(const std::pair<void*, bool>& k) const {
      return std::hash<void*>()(k.first) ^ static_cast<size_t>(k.second);
    }
  };
  mutable std::mutex mu_;
  std::deque<Step> steps_store_;  // stable addresses: a Step* is the pHandle
  std::unordered_set<const Step*> steps_;
  std::deque<Event> events_;  // stable addresses: an Event* is the eHandle
  std::unordered_set<const Event*> live_;
  // Handles given to a post of (comm, send) that has not taken them yet ("not now": the next try
  // gets the same, as NCCL retries its step with the same handle).
  std::unordered_map<std::pair<void*, bool>, std::deque<Step*>, KeyHash> given_;
  std::unordered_map<std::pair<void*, bool>, std::vector<void*>, KeyHash> arrays_;
  std::unordered_map<void*, std::vector<Step*>> by_req_;
  Counts counts_;
  std::string first_;
};

inline State& state() {
  static State s;
  return s;
}

inline ncclResult_t callback(void** eHandle, int type, void* pHandle, int64_t pluginId,
                             void* extData) {
  return state().callback(eHandle, type, pHandle, pluginId, extData);
}

// Before n.init: the callback and the step handles of `mode` (after SLUICE_TEST_PROFILER).
inline Mode attach(Net& n, Mode mode) {
  mode = mode_from_env(mode);
  state().mode = mode;
  n.profiler = mode == Mode::kOff || n.version() < 10 ? nullptr : &callback;
  n.steps = mode == Mode::kOff || n.version() < 10 ? nullptr : &state();
  return mode;
}

// SLUICE_PROFILER_EVENTS=0 (the plugin's knob): no start at all is expected.
inline bool events_off() {
  const char* v = std::getenv("SLUICE_PROFILER_EVENTS");
  return v != nullptr && (std::string(v) == "0" || std::string(v) == "false");
}

// "" or what is wrong so far: with a callback, the plugin called it (unless its events are off:
// then it must not have), and in kLoaded no breach. closed: the comms are closed, so every event
// must be stopped too.
inline std::string check(bool closed) {
  const State& s = state();
  if (s.mode == Mode::kOff) return {};
  const Counts c = s.counts();
  if (events_off() && c.starts != 0)
    return "SLUICE_PROFILER_EVENTS=0, yet the plugin called the profiler callback " +
           std::to_string(c.starts) + " times";
  if (!events_off() && c.steps > 0 && c.starts == 0)
    return "the plugin never called the profiler callback (" + std::to_string(c.steps) +
           " requests posted with a step handle): its profiler branch did not run";
  if (s.mode != Mode::kLoaded) return {};
  if (c.breaches() > 0)
    return "profiler contract broken: " + std::to_string(c.bad_start) + " bad starts, " +
           std::to_string(c.late_start) + " starts after done, " + std::to_string(c.bad_stop) +
           " bad stops, " + std::to_string(c.open_at_done) +
           " requests done with events open; the first: " + s.first_breach();
  if (closed && s.open_events() != 0)
    return std::to_string(s.open_events()) +
           " profiler events never stopped after the comms closed";
  return {};
}

// One line: the mode and the counts.
inline std::string summary() {
  const State& s = state();
  const Counts c = s.counts();
  std::string out = std::string("profiler callback: ") + mode_name(s.mode);
  if (s.mode == Mode::kOff) return out + " (none given)";
  out += " (" +
         std::string(s.mode == Mode::kDefault ? "NCCL's, no profiler plugin loaded"
                                              : "a loaded profiler's, real handles") +
         "), " + std::to_string(c.steps) + " step handles taken by posts, " +
         std::to_string(c.starts) + " starts, " + std::to_string(c.stops) + " stops";
  if (s.mode == Mode::kLoaded)
    out += ", " + std::to_string(s.open_events()) + " open, " + std::to_string(c.breaches()) +
           " breaches";
  if (events_off()) out += " (SLUICE_PROFILER_EVENTS=0)";
  return out;
}

}  // namespace nettest::nccl_profiler
