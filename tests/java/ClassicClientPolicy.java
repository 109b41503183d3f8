// The redelivery policy an ActiveMQ Classic client takes from its broker URL, read by the client's own
// ActiveMQConnectionFactory (the Debian activemq package's jars, on the classpath).
//
// `java -cp <activemq jars> ClassicClientPolicy.java` reads one broker URL per line, hex-encoded UTF-8 (so that any
// character can be tried), and writes a line per URL: "ok", the policy's maximumRedeliveries, initialRedeliveryDelay,
// redeliveryDelay, maximumRedeliveryDelay, backOffMultiplier, useExponentialBackOff, useCollisionAvoidance and
// collisionAvoidanceFactor, and the broker URL the factory kept (hex), tab-separated; or "refused" and the exception.
// With the argument `connect`, it also makes a connection of each accepted URL (to a port nothing listens on) and adds
// "connect:" and the first exception's class and message, which tells a transport refusing the URL's options from one
// refusing the connection.
//
// `... ClassicClientPolicy.java jndi FILE...` loads each file as java.util.Properties and writes a line of its
// entries ("props", then key=value pairs, each side hex, sorted; or "props-refused" and why), then makes an
// InitialContext of ActiveMQInitialContextFactory from them and writes, per connection factory it names, "factory",
// the name (hex) and the policy as above (or one line "context-refused" and why), and a line "end".
import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Hashtable;
import java.util.HexFormat;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Properties;
import java.util.StringTokenizer;
import java.util.TreeMap;

import javax.naming.Context;
import javax.naming.InitialContext;

import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.RedeliveryPolicy;
import org.apache.activemq.jndi.ActiveMQInitialContextFactory;

public class ClassicClientPolicy {

   public static void main(String[] args) throws Exception {
      if (args.length > 0 && args[0].equals("jndi")) {
         jndi(args);
         return;
      }
      boolean connect = args.length > 0 && args[0].equals("connect");
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
      for (String line = in.readLine(); line != null; line = in.readLine()) {
         String url = new String(HexFormat.of().parseHex(line.strip()), StandardCharsets.UTF_8);
         ActiveMQConnectionFactory cf;
         try {
            cf = new ActiveMQConnectionFactory(url);
         } catch (Exception e) {
            out.println("refused\t" + e.getClass().getSimpleName() + ": " + oneLine(e.getMessage()));
            continue;
         }
         StringBuilder sb = new StringBuilder("ok").append(policy(cf));
         if (connect) {
            try {
               cf.setCloseTimeout(1);
               cf.setConnectResponseTimeout(2000);
               cf.createConnection().close();
               sb.append("\tconnect: connected");
            } catch (Exception e) {
               Throwable t = e;
               while (t.getCause() != null && t.getCause() != t) {
                  t = t.getCause();
               }
               sb.append("\tconnect: ").append(t.getClass().getSimpleName()).append(": ").append(oneLine(t.getMessage()));
            }
         }
         out.println(sb);
      }
      out.flush();
   }

   private static String policy(ActiveMQConnectionFactory cf) throws Exception {
      Field factor = RedeliveryPolicy.class.getDeclaredField("collisionAvoidanceFactor");
      factor.setAccessible(true);
      RedeliveryPolicy p = cf.getRedeliveryPolicy();
      if (p == null) {  // jms.redeliveryPolicy without a value: ActiveMQMessageConsumer makes a default one
         p = new RedeliveryPolicy();
      }
      String kept = cf.getBrokerURL() == null ? "" : cf.getBrokerURL();
      StringBuilder sb = new StringBuilder();
      for (Object v : new Object[] {p.getMaximumRedeliveries(), p.getInitialRedeliveryDelay(), p.getRedeliveryDelay(),
            p.getMaximumRedeliveryDelay(), Double.toString(p.getBackOffMultiplier()), p.isUseExponentialBackOff(),
            p.isUseCollisionAvoidance(), Double.toString(factor.getDouble(p)), hex(kept)}) {
         sb.append('\t').append(v);
      }
      return sb.toString();
   }

   private static String hex(String s) {
      return HexFormat.of().formatHex(s.getBytes(StandardCharsets.UTF_8));
   }

   private static void jndi(String[] args) throws Exception {
      PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
      for (int i = 1; i < args.length; i++) {
         Properties props = new Properties();
         try (FileInputStream in = new FileInputStream(args[i])) {
            props.load(in);
         } catch (Exception e) {
            out.println("props-refused\t" + e.getClass().getSimpleName() + ": " + oneLine(e.getMessage()));
            out.println("end");
            continue;
         }
         TreeMap<String, String> sorted = new TreeMap<>();
         for (String key : props.stringPropertyNames()) {
            sorted.put(hex(key), hex(props.getProperty(key)));
         }
         StringBuilder sb = new StringBuilder("props");
         sorted.forEach((k, v) -> sb.append('\t').append(k).append('=').append(v));
         out.println(sb);
         Hashtable<Object, Object> env = new Hashtable<>(props);
         env.put(Context.INITIAL_CONTEXT_FACTORY, ActiveMQInitialContextFactory.class.getName());
         List<String> names = new ArrayList<>();
         String listed = props.getProperty("connectionFactoryNames");
         if (listed != null) {
            for (StringTokenizer t = new StringTokenizer(listed, ","); t.hasMoreTokens();) {
               names.add(t.nextToken().trim());
            }
         }
         if (names.isEmpty()) {
            names = List.of("ConnectionFactory", "XAConnectionFactory", "QueueConnectionFactory", "TopicConnectionFactory");
         }
         try {
            InitialContext context = new InitialContext(env);
            for (String name : new LinkedHashSet<>(names)) {
               out.println("factory\t" + hex(name) + policy((ActiveMQConnectionFactory) context.lookup(name)));
            }
         } catch (Exception e) {
            Throwable t = e;
            while (t.getCause() != null && t.getCause() != t) {
               t = t.getCause();
            }
            out.println("context-refused\t" + t.getClass().getSimpleName() + ": " + oneLine(t.getMessage()));
         }
         out.println("end");
      }
      out.flush();
   }

   private static String oneLine(String s) {
      return s == null ? "" : s.replace('\n', ' ').replace('\t', ' ');
   }
}
