package io.kprotocol.streamsapp;

import java.io.File;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The Kafka Streams test application: counts records per key in a persistent store (changelog on)
 * and writes the counts to an output topic. Prints one JSON line per lifecycle event on stdout.
 *
 * Arguments are key=value pairs: bootstrap, application.id, input, output, instances, state.dir,
 * and any Streams config (group.protocol, num.standby.replicas, processing.guarantee, ...).
 * Built against the current Kafka release, it runs unchanged on older Kafka Streams jars: the
 * APIs that differ between releases are reached by reflection.
 */
public final class CountApp {
    private static final Object OUT = new Object();

    private CountApp() {
    }

    public static void main(String[] args) throws Exception {
        Properties given = new Properties();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("expected key=value, got " + arg);
            }
            given.setProperty(arg.substring(0, eq), arg.substring(eq + 1));
        }
        String input = required(given, "input");
        String output = required(given, "output");
        String shape = given.getProperty("topology", "count");
        String table = given.getProperty("table");
        given.remove("topology");
        given.remove("table");
        int instances = Integer.parseInt(given.getProperty("instances", "1"));
        String stateBase = given.getProperty("state.dir", System.getProperty("java.io.tmpdir") + "/kprotocol-streams");
        given.remove("input");
        given.remove("output");
        given.remove("instances");
        given.remove("state.dir");
        String bootstrap = given.getProperty("bootstrap");
        given.remove("bootstrap");

        List<KafkaStreams> all = new ArrayList<>();
        CountDownLatch stopped = new CountDownLatch(1);
        ScheduledExecutorService poller = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "kprotocol-task-poller");
            t.setDaemon(true);
            return t;
        });
        for (int i = 0; i < instances; i++) {
            Properties props = new Properties();
            props.putAll(given);
            if (bootstrap != null) {
                props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            }
            props.put(StreamsConfig.STATE_DIR_CONFIG, stateBase + File.separator + "instance-" + i);
            props.putIfAbsent(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass().getName());
            props.putIfAbsent(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass().getName());
            final int instance = i;
            KafkaStreams streams = new KafkaStreams(topology(shape, input, output, table), props);
            streams.setStateListener((to, from) -> emit(instance, "{\"event\":\"state\",\"instance\":" + instance
                    + ",\"from\":\"" + from + "\",\"to\":\"" + to + "\"}"));
            streams.setUncaughtExceptionHandler(error -> {
                emit(instance, "{\"event\":\"error\",\"instance\":" + instance + ",\"error\":"
                        + quote(String.valueOf(error)) + "}");
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            all.add(streams);
            String[] last = {""};
            poller.scheduleAtFixedRate(() -> {
                try {
                    String tasks = tasks(streams);
                    if (!tasks.equals(last[0])) {
                        last[0] = tasks;
                        emit(instance, "{\"event\":\"tasks\",\"instance\":" + instance + "," + tasks + "}");
                    }
                } catch (RuntimeException e) {
                    // metadata is not available in every state; the next poll tries again
                }
            }, 100, 100, TimeUnit.MILLISECONDS);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            poller.shutdownNow();
            for (int i = 0; i < all.size(); i++) {
                all.get(i).close(java.time.Duration.ofSeconds(30));
            }
            emit(-1, "{\"event\":\"closed\"}");
            stopped.countDown();
        }));
        for (KafkaStreams streams : all) {
            streams.start();
        }
        emit(-1, "{\"event\":\"started\",\"instances\":" + instances + "}");
        stopped.await();
    }

    /**
     * count: counts per key in a persistent store (the default); stateless: every value upper-cased;
     * join: every record left-joined with the table topic `table` (co-partitioned), "value|table value".
     */
    private static org.apache.kafka.streams.Topology topology(String shape, String input, String output,
                                                              String table) {
        StreamsBuilder builder = new StreamsBuilder();
        org.apache.kafka.streams.kstream.KStream<String, String> source =
                builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        switch (shape) {
            case "count":
                source.groupByKey()
                        .count(Materialized.as("counts"))
                        .toStream()
                        .mapValues(count -> Long.toString(count))
                        .to(output, Produced.with(Serdes.String(), Serdes.String()));
                break;
            case "stateless":
                source.mapValues(value -> value.toUpperCase(java.util.Locale.ROOT))
                        .to(output, Produced.with(Serdes.String(), Serdes.String()));
                break;
            case "join":
                org.apache.kafka.streams.kstream.KTable<String, String> profiles =
                        builder.table(table, Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("profiles"));
                source.leftJoin(profiles, (value, profile) -> value + "|" + profile)
                        .to(output, Produced.with(Serdes.String(), Serdes.String()));
                break;
            default:
                throw new IllegalArgumentException("unknown topology " + shape);
        }
        return builder.build();
    }

    /** Active and standby tasks of every stream thread, through whichever API this release has. */
    private static String tasks(KafkaStreams streams) {
        Object threads = invoke(streams, "metadataForLocalThreads");
        if (threads == null) {
            threads = invoke(streams, "localThreadsMetadata");
        }
        TreeSet<String> active = new TreeSet<>();
        TreeSet<String> standby = new TreeSet<>();
        StringBuilder perThread = new StringBuilder();
        for (Object thread : (Collection<?>) threads) {
            TreeSet<String> threadActive = taskIds(invoke(thread, "activeTasks"));
            TreeSet<String> threadStandby = taskIds(invoke(thread, "standbyTasks"));
            active.addAll(threadActive);
            standby.addAll(threadStandby);
            if (perThread.length() > 0) {
                perThread.append(',');
            }
            perThread.append("{\"thread\":").append(quote(String.valueOf(invoke(thread, "threadName"))))
                    .append(",\"active\":").append(array(threadActive))
                    .append(",\"standby\":").append(array(threadStandby)).append('}');
        }
        return "\"state\":\"" + streams.state() + "\",\"active\":" + array(active) + ",\"standby\":" + array(standby)
                + ",\"threads\":[" + perThread + "]";
    }

    private static TreeSet<String> taskIds(Object tasks) {
        TreeSet<String> ids = new TreeSet<>();
        for (Object task : (Collection<?>) tasks) {
            Object id = invoke(task, "taskId");
            ids.add(String.valueOf(id != null ? id : invoke(task, "taskIdString")));
        }
        return ids;
    }

    private static Object invoke(Object target, String method) {
        try {
            Method m = target.getClass().getMethod(method);
            m.setAccessible(true);
            return m.invoke(target);
        } catch (NoSuchMethodException e) {
            return null;
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String array(Collection<String> values) {
        StringBuilder out = new StringBuilder("[");
        for (String value : values) {
            if (out.length() > 1) {
                out.append(',');
            }
            out.append(quote(value));
        }
        return out.append(']').toString();
    }

    private static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    private static String required(Properties props, String key) {
        String value = props.getProperty(key);
        if (value == null) {
            throw new IllegalArgumentException("missing " + key + "=...");
        }
        return value;
    }

    private static void emit(int instance, String json) {
        String line = json.substring(0, json.length() - 1) + ",\"timeMs\":" + System.currentTimeMillis() + "}";
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
