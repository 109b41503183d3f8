// The delay before each redelivery, computed by the JVM as the brokers compute it, for delays and multipliers of any
// sign, without collision avoidance (the random part, whose draws are reprocess's own: docs/adr/0002-jitter.md).
//
// `java -cp <activemq jars> RedeliveryDelays.java activemq` reads lines of initialRedeliveryDelay, redeliveryDelay,
// maximumRedeliveryDelay, useExponentialBackOff, backOffMultiplier and a count n, tab-separated, and sets them on
// ActiveMQ Classic's own org.apache.activemq.RedeliveryPolicy (the Debian activemq package's jars). For each failed
// delivery k = 1..n it writes the delay ActiveMQMessageConsumer.rollback waits after it: the initial delay given
// getNextRedeliveryDelay k-1 times (redeliveryCounter is k once the rollback counted it), and 0, at once, where that
// is not above 0 (`redeliveryDelay > 0`, else the redispatch runs at once).
//
// `java RedeliveryDelays.java artemis` reads lines of redelivery-delay, redelivery-delay-multiplier,
// max-redelivery-delay and n, and writes for k = 1..n the delay of QueueImpl.checkRedelivery: none (0) unless
// redelivery-delay is above 0, else calculateRedeliveryDelay (private in QueueImpl, copied from Artemis 2.44, Apache
// License 2.0, without its collision avoidance), a scheduled time already past (a delay below 0) being at once (0).
// Artemis's jars are not on this machine: this checks the JVM's Math.pow and (long) casts, which the copy keeps.
//
// Output: one line per input line, the n delays tab-separated. These are the delays the brokers compute, not the times
// they schedule: a delay that takes the time past Long.MAX_VALUE is a past time to Artemis and a refusal to
// ActiveMQ's timer, which reprocess does not follow (docs/adr/0001-counting.md).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.StringJoiner;

public class RedeliveryDelays {

   public static void main(String[] args) throws Exception {
      boolean activemq = args[0].equals("activemq");
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
      for (String line = in.readLine(); line != null; line = in.readLine()) {
         String[] f = line.strip().split("\t");
         out.println(activemq ? activemq(f) : artemis(f));
      }
      out.flush();
   }

   // reflection, so that this file compiles without the jars when run for artemis
   private static String activemq(String[] f) throws Exception {
      Class<?> cls = Class.forName("org.apache.activemq.RedeliveryPolicy");
      Object policy = cls.getConstructor().newInstance();
      cls.getMethod("setInitialRedeliveryDelay", long.class).invoke(policy, Long.parseLong(f[0]));
      cls.getMethod("setRedeliveryDelay", long.class).invoke(policy, Long.parseLong(f[1]));
      cls.getMethod("setMaximumRedeliveryDelay", long.class).invoke(policy, Long.parseLong(f[2]));
      cls.getMethod("setUseExponentialBackOff", boolean.class).invoke(policy, Boolean.parseBoolean(f[3]));
      cls.getMethod("setBackOffMultiplier", double.class).invoke(policy, Double.parseDouble(f[4]));
      cls.getMethod("setUseCollisionAvoidance", boolean.class).invoke(policy, false);
      Method initial = cls.getMethod("getInitialRedeliveryDelay");
      Method next = cls.getMethod("getNextRedeliveryDelay", long.class);
      int n = Integer.parseInt(f[5]);
      StringJoiner delays = new StringJoiner("\t");
      for (int k = 1; k <= n; k++) {
         // ActiveMQMessageConsumer.rollback, currentRedeliveryCount = k
         long redeliveryDelay = (long) initial.invoke(policy);
         for (int i = 0; i < (k - 1); i++) {
            redeliveryDelay = (long) next.invoke(policy, redeliveryDelay);
         }
         delays.add(Long.toString(redeliveryDelay > 0 ? redeliveryDelay : 0));
      }
      return delays.toString();
   }

   private static String artemis(String[] f) {
      long redeliveryDelay = Long.parseLong(f[0]);
      double redeliveryMultiplier = Double.parseDouble(f[1]);
      long maxRedeliveryDelay = Long.parseLong(f[2]);
      int n = Integer.parseInt(f[3]);
      StringJoiner delays = new StringJoiner("\t");
      for (int deliveryCount = 1; deliveryCount <= n; deliveryCount++) {
         long delay = 0;
         if (redeliveryDelay > 0) {  // checkRedelivery
            // calculateRedeliveryDelay
            int tmpDeliveryCount = deliveryCount > 0 ? deliveryCount - 1 : 0;
            delay = (long) (redeliveryDelay * (Math.pow(redeliveryMultiplier, tmpDeliveryCount)));
            if (delay > maxRedeliveryDelay) {
               delay = maxRedeliveryDelay;
            }
         }
         delays.add(Long.toString(delay > 0 ? delay : 0));
      }
      return delays.toString();
   }
}
