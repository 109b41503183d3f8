// What an ActiveMQ Classic broker chooses for a queue, computed by the broker's own classes (the Debian activemq
// package's jars, on the classpath). The choice mode writes out two lines of DestinationMap.chooseValue (its filter
// of the entries found, and its comparator) to try every order of insertion; getEntryFor's own answer is checked too.
//
// `java -cp <activemq jars> ClassicBrokerChoice.java choice` reads pairs of lines, the entries' queue names and then
// the queues to look up, each tab-separated, and builds a RedeliveryPolicyMap of one RedeliveryPolicy per name (its
// maximumRedeliveries the entry's index). For each queue it writes the indexes of the entries the map finds for it
// (DestinationMap.get, kept as chooseValue keeps them), a '|', the indexes of those that come first in the TreeSet
// chooseValue sorts them in, over every order of insertion (chooseValue adds them in a HashSet's order, which
// identity hashes decide), a '|', and the index RedeliveryPolicyMap.getEntryFor itself returned.
//
// `... ClassicBrokerChoice.java xml FILE...` reads one line of tab-separated queues, loads each activemq.xml through
// XBean as the broker does (it must say start="false"), and writes, per file and queue, what its redelivery plugin
// gives the queue ("none" for no entry, else the entry's settings) and its policy map's dead-letter strategy for it.
//
// `... ClassicBrokerChoice.java start FILE...` loads each file (start="false", no transport connector: it binds no
// port) and starts the broker, which installs its plugins; it writes a line per file, "started" or "refused: " and
// why, then stops it.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;
import java.util.TreeSet;
import java.util.function.Consumer;

import org.apache.activemq.RedeliveryPolicy;
import org.apache.activemq.broker.BrokerPlugin;
import org.apache.activemq.broker.BrokerService;
import org.apache.activemq.broker.region.policy.DeadLetterStrategy;
import org.apache.activemq.broker.region.policy.DiscardingDeadLetterStrategy;
import org.apache.activemq.broker.region.policy.IndividualDeadLetterStrategy;
import org.apache.activemq.broker.region.policy.PolicyEntry;
import org.apache.activemq.broker.region.policy.PolicyMap;
import org.apache.activemq.broker.region.policy.RedeliveryPolicyMap;
import org.apache.activemq.broker.region.policy.SharedDeadLetterStrategy;
import org.apache.activemq.broker.util.RedeliveryPlugin;
import org.apache.activemq.command.ActiveMQMessage;
import org.apache.activemq.command.ActiveMQQueue;
import org.apache.activemq.filter.DestinationFilter;
import org.apache.xbean.spring.context.FileSystemXmlApplicationContext;

public class ClassicBrokerChoice {

   public static void main(String[] args) throws Exception {
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
      if (args[0].equals("choice")) {
         choice(in, out);
      } else if (args[0].equals("start")) {
         for (int i = 1; i < args.length; i++) {
            out.println(start(args[i]));
         }
      } else {
         String[] queues = in.readLine().split("\t", -1);
         for (int i = 1; i < args.length; i++) {
            xml(args[i], queues, out);
         }
      }
      out.flush();
   }

   static void choice(BufferedReader in, PrintWriter out) throws Exception {
      String names;
      while ((names = in.readLine()) != null) {
         String[] queues = in.readLine().split("\t", -1);
         RedeliveryPolicyMap map = new RedeliveryPolicyMap();
         List<RedeliveryPolicy> entries = new ArrayList<>();
         for (String name : names.split("\t", -1)) {
            RedeliveryPolicy entry = new RedeliveryPolicy();
            entry.setQueue(name);
            entry.setMaximumRedeliveries(entries.size());
            entries.add(entry);
         }
         map.setRedeliveryPolicyEntries(entries);
         for (String queue : queues) {
            ActiveMQQueue destination = new ActiveMQQueue(queue);
            List<RedeliveryPolicy> matching = new ArrayList<>();
            for (Object found : map.get(destination)) {  // chooseValue's filter: isMatchOrParent
               RedeliveryPolicy entry = (RedeliveryPolicy) found;
               if (destination.equals(entry.getDestination())
                     || DestinationFilter.parseFilter(entry.getDestination()).matches(destination)) {
                  matching.add(entry);
               }
            }
            matching.sort(Comparator.comparingInt(RedeliveryPolicy::getMaximumRedeliveries));
            Comparator<RedeliveryPolicy> comparator = (e1, e2) -> destination.equals(e1.getDestination()) ? -1
                  : (destination.equals(e2.getDestination()) ? 1 : e1.compareTo(e2));  // chooseValue's
            TreeSet<Integer> first = new TreeSet<>();
            if (matching.size() > 7) {
               throw new IllegalStateException("too many matching entries to try every order: " + queue);
            }
            if (!matching.isEmpty()) {
               permute(matching, 0, order -> {
                  TreeSet<RedeliveryPolicy> sorted = new TreeSet<>(comparator);
                  sorted.addAll(order);
                  first.add(sorted.first().getMaximumRedeliveries());
               });
            }
            RedeliveryPolicy real = map.getEntryFor(destination);
            out.println(join(matching.stream().map(RedeliveryPolicy::getMaximumRedeliveries).toList()) + "|"
                  + join(new ArrayList<>(first)) + "|" + (real == null ? "" : real.getMaximumRedeliveries()));
         }
      }
   }

   static void xml(String file, String[] queues, PrintWriter out) {
      FileSystemXmlApplicationContext context = new FileSystemXmlApplicationContext("file:" + file);
      try {
         BrokerService broker = context.getBean(BrokerService.class);
         RedeliveryPolicyMap map = null;
         for (BrokerPlugin plugin : broker.getPlugins() == null ? new BrokerPlugin[0] : broker.getPlugins()) {
            if (plugin instanceof RedeliveryPlugin redelivery) {
               map = redelivery.getRedeliveryPolicyMap();
            }
         }
         PolicyMap policies = broker.getDestinationPolicy();
         for (String queue : queues) {
            ActiveMQQueue destination = new ActiveMQQueue(queue);
            RedeliveryPolicy entry = map == null ? null : map.getEntryFor(destination);
            PolicyEntry policy = policies == null ? null : policies.getEntryFor(destination);
            out.println((entry == null ? "none" : settings(entry)) + "|"
                  + dead(policy == null ? null : policy.getDeadLetterStrategy(), destination));
         }
      } finally {
         context.close();
      }
   }

   static String start(String file) {
      FileSystemXmlApplicationContext context = null;
      try {
         context = new FileSystemXmlApplicationContext("file:" + file);
         BrokerService broker = context.getBean(BrokerService.class);
         broker.start();
         broker.stop();
         broker.waitUntilStopped();
         return "started";
      } catch (Exception e) {
         Throwable cause = e;
         while (cause.getCause() != null) {
            cause = cause.getCause();
         }
         return "refused: " + cause.getMessage().replace('\n', ' ');
      } finally {
         if (context != null) {
            context.close();
         }
      }
   }

   static String settings(RedeliveryPolicy p) {
      return p.getMaximumRedeliveries() + "," + p.getInitialRedeliveryDelay() + "," + p.getRedeliveryDelay() + ","
            + p.isUseExponentialBackOff() + "," + p.getBackOffMultiplier() + "," + p.getMaximumRedeliveryDelay() + ","
            + p.isUseCollisionAvoidance() + "," + p.getCollisionAvoidancePercent();
   }

   /** The queue the strategy sends a dead letter of a message on the queue to: "dlq:<name>". */
   static String dead(DeadLetterStrategy strategy, ActiveMQQueue queue) {
      if (strategy == null) {
         return "dlq:ActiveMQ.DLQ";  // BaseDestination's DEFAULT_DEAD_LETTER_STRATEGY, with no policy entry
      }
      if (strategy instanceof DiscardingDeadLetterStrategy) {
         return "discarding";
      }
      if (strategy instanceof SharedDeadLetterStrategy || strategy instanceof IndividualDeadLetterStrategy) {
         ActiveMQMessage message = new ActiveMQMessage();
         message.setDestination(queue);
         return "dlq:" + strategy.getDeadLetterQueueFor(message, null).getPhysicalName();
      }
      return strategy.getClass().getSimpleName();
   }

   static String join(List<Integer> values) {
      StringBuilder line = new StringBuilder();
      for (int v : values) {
         line.append(line.length() == 0 ? "" : ",").append(v);
      }
      return line.toString();
   }

   static void permute(List<RedeliveryPolicy> items, int k, Consumer<List<RedeliveryPolicy>> each) {
      if (k == items.size()) {
         each.accept(new ArrayList<>(items));
         return;
      }
      for (int i = k; i < items.size(); i++) {
         Collections.swap(items, k, i);
         permute(items, k + 1, each);
         Collections.swap(items, k, i);
      }
   }
}
