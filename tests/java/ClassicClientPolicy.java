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
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.RedeliveryPolicy;

public class ClassicClientPolicy {

   public static void main(String[] args) throws Exception {
      boolean connect = args.length > 0 && args[0].equals("connect");
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
      Field factor = RedeliveryPolicy.class.getDeclaredField("collisionAvoidanceFactor");
      factor.setAccessible(true);
      for (String line = in.readLine(); line != null; line = in.readLine()) {
         String url = new String(HexFormat.of().parseHex(line.strip()), StandardCharsets.UTF_8);
         ActiveMQConnectionFactory cf;
         try {
            cf = new ActiveMQConnectionFactory(url);
         } catch (Exception e) {
            out.println("refused\t" + e.getClass().getSimpleName() + ": " + oneLine(e.getMessage()));
            continue;
         }
         RedeliveryPolicy p = cf.getRedeliveryPolicy();
         String kept = cf.getBrokerURL() == null ? "" : cf.getBrokerURL();
         StringBuilder sb = new StringBuilder("ok");
         for (Object v : new Object[] {p.getMaximumRedeliveries(), p.getInitialRedeliveryDelay(), p.getRedeliveryDelay(),
               p.getMaximumRedeliveryDelay(), Double.toString(p.getBackOffMultiplier()), p.isUseExponentialBackOff(),
               p.isUseCollisionAvoidance(), Double.toString(factor.getDouble(p)),
               HexFormat.of().formatHex(kept.getBytes(StandardCharsets.UTF_8))}) {
            sb.append('\t').append(v);
         }
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

   private static String oneLine(String s) {
      return s == null ? "" : s.replace('\n', ' ').replace('\t', ' ');
   }
}
