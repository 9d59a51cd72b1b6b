import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.coordinator.group.api.streams.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.streams.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.streams.assignor.TopologyDescriber;
import org.apache.kafka.coordinator.group.streams.assignor.AssignmentConfigsImpl;
import org.apache.kafka.coordinator.group.streams.assignor.GroupSpecImpl;
import org.apache.kafka.coordinator.group.streams.assignor.MemberMetadataAndStateImpl;
import org.apache.kafka.coordinator.group.streams.assignor.StickyTaskAssignor;

/**
 * Prints, as one JSON object, what tests/test_streams_group_assignor_exact.py expects: the iteration orders of
 * java.util.HashMap and PriorityQueue it emulates, and the targets Kafka's broker StickyTaskAssignor computes for
 * its inputs. Run from source against the release's jars, after a new Kafka release or JDK:
 * {@code java -cp "$HOME/.cache/kprotocol/kafka-<version>/libs/*" java/expected-orders/ExpectedOrders.java}
 */
public final class ExpectedOrders {
    private static final List<String> AABB = List.of("AaAaAaAa", "AaAaAaBB", "AaAaBBAa", "AaAaBBBB", "AaBBAaAa",
        "AaBBAaBB", "AaBBBBAa", "AaBBBBBB", "BBAaAaAa");

    private ExpectedOrders() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        List<String> processes = List.of("process-m0-1", "process-m1-1", "process-m2-1", "process-m1-2");
        out.put("capacity 4, put", put(new HashMap<>(4), processes));
        out.put("capacity 4, computeIfAbsent", computeIfAbsent(new HashMap<>(4), processes));
        List<String> four = List.of("process-a", "process-b", "process-c", "process-d");
        out.put("4 keys in 4, computeIfAbsent", computeIfAbsent(new HashMap<>(4), four));
        List<String> again = new ArrayList<>(four);
        again.add("process-a");
        out.put("4 keys in 4 and one again, computeIfAbsent", computeIfAbsent(new HashMap<>(4), again));
        out.put("4 keys in 4, put", put(new HashMap<>(4), four));
        List<String> others = List.of("k0", "k1", "k2", "k3", "k4");
        List<String> eight = new ArrayList<>(others);
        eight.addAll(AABB.subList(0, 8));
        out.put("a chain of 8", put(new HashMap<>(), eight));
        List<String> nine = new ArrayList<>(others);
        nine.addAll(AABB);
        out.put("a chain of 9", put(new HashMap<>(), nine));
        out.put("priority queue ties", priorityQueue());
        out.put("least loaded process", sticky(List.of(
                member("m0-1", "process-m0-1", "0_0 0_1 0_2 0_3", ""), member("m1-1", "process-m1-1", "", ""),
                member("m2-1", "process-m2-1", "", ""), member("m1-2", "process-m1-2", "", "")),
            Map.of(), new String[] {"0"}, new int[] {4}, Set.of(), 0));
        out.put("standbys ranked by offsets", sticky(List.of(
                member("a1", "P1", "0_0 0_1", "0_2"), member("a2", "P1", "", "0_3"), member("b1", "P2", "0_2 1_0", ""),
                member("c1", "P3", "", "")),
            Map.of("a1", Map.of("0_3", 100L), "a2", Map.of("0_2", 500L, "0_0", 50L),
                   "b1", Map.of("0_0", 900L, "0_1", 900L), "c1", Map.of("0_1", 1000L, "0_3", 10L)),
            new String[] {"0", "1"}, new int[] {4, 2}, Set.of("0"), 1));
        out.put("two standbys over shared processes", sticky(List.of(
                member("m1", "P1", "0_0 0_1 0_2", ""), member("m2", "P1", "1_0 1_1", ""),
                member("m3", "P2", "1_2 1_3 1_4", "0_0"), member("m4", "P2", "", ""), member("m5", "P3", "", ""),
                member("m6", "P3", "", "")),
            Map.of("m4", Map.of("0_1", 7L, "1_1", 7L), "m5", Map.of("1_0", 3L), "m6", Map.of("1_0", 4L)),
            new String[] {"0", "1"}, new int[] {3, 5}, Set.of("0", "1"), 2));
        System.out.println(new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValueAsString(out));
    }

    private static List<String> put(HashMap<String, Boolean> map, List<String> keys) {
        keys.forEach(k -> map.put(k, true));
        return new ArrayList<>(map.keySet());
    }

    private static List<String> computeIfAbsent(HashMap<String, Boolean> map, List<String> keys) {
        keys.forEach(k -> map.computeIfAbsent(k, x -> true));
        return new ArrayList<>(map.keySet());
    }

    /** The polls of the test's sequence: seven keys of equal load, some loads raised, some not added back. */
    private static List<String> priorityQueue() {
        Map<String, Integer> load = new HashMap<>();
        for (String k : "abcdefg".split("")) {
            load.put(k, 0);
        }
        PriorityQueue<String> queue = new PriorityQueue<>(Comparator.comparingInt(load::get));
        queue.addAll(List.of("abcdefg".split("")));
        List<String> polled = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            String item = queue.poll();
            polled.add(item);
            load.merge(item, i % 3 == 0 ? 1 : 0, Integer::sum);
            if (i % 4 != 3) {
                queue.add(item);
            }
        }
        return polled;
    }

    private record Member(String id, String process, Map<String, Set<Integer>> active,
                          Map<String, Set<Integer>> standby) {
    }

    private static Member member(String id, String process, String active, String standby) {
        return new Member(id, process, tasks(active), tasks(standby));
    }

    private static Map<String, Set<Integer>> tasks(String text) {
        Map<String, Set<Integer>> out = new HashMap<>();
        for (String task : text.split(" ")) {
            if (!task.isEmpty()) {
                String[] parts = task.split("_");
                out.computeIfAbsent(parts[0], k -> new java.util.HashSet<>()).add(Integer.parseInt(parts[1]));
            }
        }
        return out;
    }

    /** Member id -> [active, standby] as "sub_partition" lists, for members given in the order of the map. */
    private static Map<String, List<String>> sticky(List<Member> members, Map<String, Map<String, Long>> offsets,
                                                   String[] subtopologies, int[] partitions, Set<String> stateful,
                                                   int standbys) {
        Map<String, MemberMetadataAndStateImpl> specs = new LinkedHashMap<>();
        for (Member m : members) {
            Map<String, Map<Integer, Long>> taskOffsets = new HashMap<>();
            offsets.getOrDefault(m.id(), Map.of()).forEach((task, offset) -> {
                String[] parts = task.split("_");
                taskOffsets.computeIfAbsent(parts[0], k -> new HashMap<>()).put(Integer.parseInt(parts[1]), offset);
            });
            specs.put(m.id(), new MemberMetadataAndStateImpl(Optional.empty(), Optional.empty(), m.process(), Map.of(),
                m.active(), m.standby(), Map.of(), taskOffsets, Map.of()));
        }
        Map<String, Integer> counts = new LinkedHashMap<>();
        for (int i = 0; i < subtopologies.length; i++) {
            counts.put(subtopologies[i], partitions[i]);
        }
        TopologyDescriber topology = new TopologyDescriber() {
            @Override
            public List<String> subtopologies() {
                return new ArrayList<>(counts.keySet());
            }

            @Override
            public int maxNumInputPartitions(String subtopology) {
                return counts.get(subtopology);
            }

            @Override
            public boolean isStateful(String subtopology) {
                return stateful.contains(subtopology);
            }
        };
        GroupAssignment assignment = new StickyTaskAssignor().assign(
            new GroupSpecImpl(specs, new AssignmentConfigsImpl(standbys, List.of())), topology);
        Map<String, List<String>> out = new LinkedHashMap<>();
        for (Member m : members) {
            MemberAssignment target = assignment.members().get(m.id());
            out.put(m.id(), Arrays.asList(text(target.activeTasks()), text(target.standbyTasks())));
        }
        return out;
    }

    private static String text(Map<String, Set<Integer>> tasks) {
        List<String> out = new ArrayList<>();
        new TreeMap<>(tasks).forEach((sub, parts) -> new TreeSet<>(parts).forEach(p -> out.add(sub + "_" + p)));
        return String.join(" ", out);
    }
}
