package io.kprotocol.tester;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Enumeration;
import java.util.HexFormat;
import java.util.Map;
import java.util.TreeMap;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;

/**
 * Kafka's own generated message classes as a round-trip oracle, one long-lived JVM fed JSON lines:
 *
 * <pre>
 * {"op":"list"}  ->  {"specs":{"JoinGroupRequest":[0,9],...}}
 * {"op":"roundtrip","spec":"JoinGroupRequest","version":7,"items":["hex",...]}
 *     ->  {"results":[{"hex":"...","json":{...}} | {"error":"..."}]}
 * </pre>
 *
 * Each item is read by Kafka's class, written back, and rendered by its JSON converter (when Kafka
 * generated one: Streams' userdata classes have none, so only their bytes are judged).
 */
public final class RoundTripServer {
    private static final String[] PACKAGES = {
        "org/apache/kafka/common/message/",
        "org/apache/kafka/coordinator/group/generated/",
        "org/apache/kafka/coordinator/share/generated/",
        "org/apache/kafka/coordinator/transaction/generated/",
        "org/apache/kafka/streams/internals/generated/",
    };

    private final ObjectMapper mapper = new ObjectMapper();
    private final Map<String, Class<?>> classes = new TreeMap<>();

    private RoundTripServer() throws IOException {
        for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
            if (entry.endsWith(".jar") && new File(entry).isFile()) {
                scan(new File(entry));
            } else if (entry.endsWith("*")) {
                File[] jars = new File(entry.substring(0, entry.length() - 1)).listFiles((d, n) -> n.endsWith(".jar"));
                for (File jar : jars == null ? new File[0] : jars) {
                    scan(jar);
                }
            }
        }
    }

    private void scan(File jar) throws IOException {
        try (JarFile file = new JarFile(jar)) {
            Enumeration<JarEntry> entries = file.entries();
            while (entries.hasMoreElements()) {
                String name = entries.nextElement().getName();
                if (!name.endsWith(".class") || name.contains("$") || name.endsWith("JsonConverter.class")) {
                    continue;
                }
                for (String prefix : PACKAGES) {
                    if (name.startsWith(prefix) && name.indexOf('/', prefix.length()) < 0) {
                        register(name.substring(0, name.length() - ".class".length()).replace('/', '.'));
                    }
                }
            }
        }
    }

    private void register(String className) {
        try {
            Class<?> cls = Class.forName(className);
            if (!Message.class.isAssignableFrom(cls) || Modifier.isAbstract(cls.getModifiers())
                    || cls.isInterface()) {
                return;
            }
            String simple = cls.getSimpleName();
            boolean apiOrHeader = simple.endsWith("RequestData") || simple.endsWith("ResponseData")
                    || simple.endsWith("HeaderData");
            String spec = apiOrHeader ? simple.substring(0, simple.length() - 4) : simple;
            classes.put(spec, cls);
        } catch (ClassNotFoundException | LinkageError e) {
            // a converter without its message class: nothing to test
        }
    }

    private JsonNode list() throws ReflectiveOperationException {
        ObjectNode specs = mapper.createObjectNode();
        for (Map.Entry<String, Class<?>> e : classes.entrySet()) {
            Message message = (Message) e.getValue().getConstructor().newInstance();
            ArrayNode range = specs.putArray(e.getKey());
            range.add(message.lowestSupportedVersion());
            range.add(message.highestSupportedVersion());
        }
        ObjectNode out = mapper.createObjectNode();
        out.set("specs", specs);
        return out;
    }

    private JsonNode roundTrip(JsonNode request) throws ReflectiveOperationException {
        Class<?> cls = classes.get(request.get("spec").asText());
        if (cls == null) {
            throw new IllegalArgumentException("unknown spec " + request.get("spec").asText());
        }
        short version = (short) request.get("version").asInt();
        Constructor<?> read = cls.getConstructor(Readable.class, short.class);
        Method write = converter(cls);
        ArrayNode results = mapper.createArrayNode();
        for (JsonNode item : request.get("items")) {
            ObjectNode result = results.addObject();
            try {
                byte[] input = HexFormat.of().parseHex(item.asText());
                ByteBufferAccessor reader = new ByteBufferAccessor(ByteBuffer.wrap(input));
                Message message = (Message) read.newInstance(reader, version);
                if (reader.remaining() != 0) {
                    result.put("error", reader.remaining() + " bytes left after reading");
                    continue;
                }
                // JSON first: writing hands the records buffers over and leaves them consumed
                JsonNode json = write == null ? null : (JsonNode) write.invoke(null, message, version);
                ObjectSerializationCache cache = new ObjectSerializationCache();
                ByteBuffer out = ByteBuffer.allocate(message.size(cache, version));
                message.write(new ByteBufferAccessor(out), cache, version);
                result.put("hex", HexFormat.of().formatHex(out.array()));
                if (json != null) {
                    result.set("json", json);
                }
            } catch (java.lang.reflect.InvocationTargetException e) {
                result.put("error", String.valueOf(e.getCause()));
            } catch (RuntimeException e) {
                result.put("error", String.valueOf(e));
            }
        }
        ObjectNode out = mapper.createObjectNode();
        out.set("results", results);
        return out;
    }

    /** The static write method of the class's JSON converter, or null when Kafka generated none. */
    private static Method converter(Class<?> cls) throws NoSuchMethodException {
        try {
            return Class.forName(cls.getName() + "JsonConverter").getMethod("write", cls, short.class);
        } catch (ClassNotFoundException e) {
            return null;
        }
    }

    public static void main(String[] args) throws Exception {
        RoundTripServer server = new RoundTripServer();
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            JsonNode reply;
            try {
                JsonNode request = server.mapper.readTree(line);
                String op = request.get("op").asText();
                reply = "list".equals(op) ? server.list() : server.roundTrip(request);
            } catch (Exception e) {
                ObjectNode error = server.mapper.createObjectNode();
                error.put("error", String.valueOf(e));
                reply = error;
            }
            out.println(server.mapper.writeValueAsString(reply));
            out.flush();
        }
    }
}
