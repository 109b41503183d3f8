// The redelivery policy an ActiveMQ Classic broker's RedeliveryPolicyMap chooses for a queue, computed by the JVM:
// DestinationMapNode's tree lookup, DestinationFilter.parseFilter with its Prefix, Wildcard and Simple filters,
// ActiveMQDestination.compare and DestinationMap.chooseValue (copied from ActiveMQ Classic c3580e7, Apache License
// 2.0, for queues only: no composite, temporary or topic destinations), sorted by the real java.util.TreeSet.
//
// chooseValue adds the matching entries to its TreeSet in the order of a HashSet of them, which their identity
// hashes decide, so this tries every order of the matching entries (up to 7 of them) and reports each entry that
// comes first in one.
//
// Run with `java ClassicRedeliveryChoice.java`. Reads pairs of lines, the entries' queue names and then the
// queues to look up, each tab-separated; writes one line per queue: the indexes of the entries matching it, a
// '|', the indexes of those that can be chosen (all sorted, comma-separated).
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

public class ClassicRedeliveryChoice {
   static final String ANY_DESCENDENT = ">";
   static final String ANY_CHILD = "*";

   // ActiveMQDestination, queues only: a name, whether it is a pattern, its paths
   record Dest(String physicalName) {
      boolean isPattern() {
         for (char c : physicalName.toCharArray()) {
            if (c == '*' || c == '>') {
               return true;
            }
         }
         return false;
      }

      String[] paths() {  // DestinationPath.getDestinationPaths
         List<String> list = new ArrayList<>();
         int previous = 0;
         int lastIndex = physicalName.length() - 1;
         while (true) {
            int idx = physicalName.indexOf('.', previous);
            if (idx < 0) {
               list.add(physicalName.substring(previous, lastIndex + 1));
               break;
            }
            list.add(physicalName.substring(previous, idx));
            previous = idx + 1;
         }
         return list.toArray(new String[0]);
      }
   }

   // an entry: a RedeliveryPolicy, equal only to itself (no equals/hashCode of its own)
   static final class Entry {
      final int index;
      final Dest destination;

      Entry(int index, Dest destination) {
         this.index = index;
         this.destination = destination;
      }
   }

   interface Filter {
      boolean matches(Dest d);
   }

   static Filter parseFilter(Dest destination) {  // DestinationFilter.parseFilter
      String[] paths = destination.paths();
      int idx = paths.length - 1;
      if (idx >= 0) {
         String lastPath = paths[idx];
         if (lastPath.equals(ANY_DESCENDENT)) {
            return prefixFilter(paths);
         } else {
            while (idx >= 0) {
               lastPath = paths[idx--];
               if (lastPath.equals(ANY_CHILD)) {
                  return wildcardFilter(paths);
               }
            }
         }
      }
      return d -> destination.equals(d);
   }

   static Filter prefixFilter(String[] given) {  // PrefixDestinationFilter
      int lastIndex = given.length - 1;
      while (lastIndex >= 0 && ANY_DESCENDENT.equals(given[lastIndex])) {
         lastIndex--;
      }
      String[] prefixes = new String[lastIndex + 2];
      System.arraycopy(given, 0, prefixes, 0, prefixes.length);
      return d -> {
         String[] path = d.paths();
         int length = prefixes.length;
         if (path.length >= length) {
            int size = length - 1;
            for (int i = 0; i < size; i++) {
               if (!prefixMatches(prefixes[i], path[i])) {
                  return false;
               }
            }
            return true;
         } else {
            boolean match = true;
            for (int i = 0; (i < path.length && match); i++) {
               match = prefixMatches(prefixes[i], path[i]);
            }
            return match && prefixes.length == (path.length + 1);
         }
      };
   }

   static boolean prefixMatches(String prefix, String path) {
      return path.equals(ANY_CHILD) || prefix.equals(ANY_CHILD) || prefix.equals(path);
   }

   static Filter wildcardFilter(String[] given) {  // WildcardDestinationFilter
      String[] prefixes = new String[given.length];
      for (int i = 0; i < given.length; i++) {
         if (!given[i].equals("*")) {
            prefixes[i] = given[i];
         }
      }
      return d -> {
         String[] path = d.paths();
         int length = prefixes.length;
         if (path.length == length) {
            for (int i = 0; i < length; i++) {
               String prefix = prefixes[i];
               if (prefix != null && !prefix.equals(path[i])) {
                  return false;
               }
            }
            return true;
         }
         return false;
      };
   }

   static int compare(Dest destination, Dest destination2) {  // ActiveMQDestination.compare, one type
      if (destination == destination2) {
         return 0;
      }
      if (destination.isPattern() && destination2.isPattern()) {
         if (destination.physicalName().compareTo(destination2.physicalName()) == 0) {
            return 0;
         }
      }
      if (destination.isPattern()) {
         if (parseFilter(destination).matches(destination2)) {
            return 1;
         }
      }
      if (destination2.isPattern()) {
         if (parseFilter(destination2).matches(destination)) {
            return -1;
         }
      }
      return destination.physicalName().compareTo(destination2.physicalName());
   }

   // DestinationMapNode
   static final class Node implements NodeLike {
      final Node parent;
      final List<Entry> values = new ArrayList<>();
      final Map<String, Node> childNodes = new HashMap<>();
      final int pathLength;

      Node(Node parent) {
         this.parent = parent;
         this.pathLength = parent == null ? 0 : parent.pathLength + 1;
      }

      public Node getChild(String path) {
         return childNodes.get(path);
      }

      public Collection<Entry> getValues() {
         return values;
      }

      void add(String[] paths, int idx, Entry value) {
         if (idx >= paths.length) {
            values.add(value);
         } else {
            childNodes.computeIfAbsent(paths[idx], p -> new Node(this)).add(paths, idx + 1, value);
         }
      }

      void appendDescendantValues(Set<Entry> answer) {
         for (Node child : childNodes.values()) {
            answer.addAll(child.values);
            child.appendDescendantValues(answer);
         }
      }

      public Set<Entry> getDesendentValues() {
         Set<Entry> answer = new HashSet<>();
         appendDescendantValues(answer);
         return answer;
      }

      public void appendMatchingWildcards(Set<Entry> answer, String[] paths, int idx) {
         if (idx - 1 > pathLength) {
            return;
         }
         Node wildCardNode = getChild(ANY_CHILD);
         if (wildCardNode != null) {
            wildCardNode.appendMatchingValues(answer, paths, idx + 1);
         }
         wildCardNode = getChild(ANY_DESCENDENT);
         if (wildCardNode != null) {
            answer.addAll(wildCardNode.values);
            answer.addAll(wildCardNode.getDesendentValues());
         }
      }

      void appendMatchingValues(Set<Entry> answer, String[] paths, int startIndex) {
         NodeLike node = this;
         boolean couldMatchAny = true;
         int size = paths.length;
         for (int i = startIndex; i < size && node != null; i++) {
            String path = paths[i];
            if (path != null && path.equals(ANY_DESCENDENT)) {
               answer.addAll(node.getDesendentValues());
               couldMatchAny = false;
               break;
            }
            node.appendMatchingWildcards(answer, paths, i);
            if (path.equals(ANY_CHILD)) {
               throw new IllegalArgumentException("a queue named with '*' (AnyChildDestinationNode) is not copied");
            } else {
               node = node.getChild(path);
            }
         }
         if (node != null) {
            answer.addAll(node.getValues());
            if (couldMatchAny) {
               NodeLike child = node.getChild(ANY_DESCENDENT);
               if (child != null) {
                  answer.addAll(child.getValues());
               }
            }
         }
      }
   }

   // DestinationNode: what the lookup walks
   interface NodeLike {
      NodeLike getChild(String path);

      Collection<Entry> getValues();

      Set<Entry> getDesendentValues();

      void appendMatchingWildcards(Set<Entry> answer, String[] paths, int idx);
   }

   static Set<Entry> lookup(Node root, Dest key) {  // DestinationMap.findWildcardMatches
      Set<Entry> answer = new HashSet<>();
      root.appendMatchingValues(answer, key.paths(), 0);
      return answer;
   }

   public static void main(String[] args) throws IOException {
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
      String names;
      while ((names = in.readLine()) != null) {
         String queues = in.readLine();
         List<Entry> entries = new ArrayList<>();
         Node root = new Node(null);
         for (String name : names.split("\t", -1)) {
            Entry entry = new Entry(entries.size(), new Dest(name));
            entries.add(entry);
            root.add(entry.destination.paths(), 0, entry);  // DestinationMap.put
         }
         for (String queue : queues.split("\t", -1)) {
            Dest destination = new Dest(queue);
            List<Entry> matching = new ArrayList<>();
            for (Entry entry : lookup(root, destination)) {  // chooseValue's filter: isMatchOrParent
               if (destination.equals(entry.destination) || parseFilter(entry.destination).matches(destination)) {
                  matching.add(entry);
               }
            }
            matching.sort(Comparator.comparingInt(e -> e.index));
            Comparator<Entry> comparator = (entry1, entry2) -> destination.equals(entry1.destination) ? -1
                  : (destination.equals(entry2.destination) ? 1 : compare(entry1.destination, entry2.destination));
            TreeSet<Integer> chosen = new TreeSet<>();
            if (!matching.isEmpty()) {
               if (matching.size() > 7) {
                  throw new IllegalStateException("too many matching entries to try every order: " + queue);
               }
               permute(matching, 0, order -> {
                  TreeSet<Entry> sorted = new TreeSet<>(comparator);
                  sorted.addAll(order);
                  chosen.add(sorted.first().index);
               });
            }
            StringBuilder line = new StringBuilder();
            for (Entry e : matching) {
               line.append(line.length() == 0 ? "" : ",").append(e.index);
            }
            line.append('|');
            String sep = "";
            for (int c : chosen) {
               line.append(sep).append(c);
               sep = ",";
            }
            out.println(line);
         }
      }
      out.flush();
   }

   static void permute(List<Entry> items, int k, java.util.function.Consumer<List<Entry>> each) {
      if (k == items.size()) {
         each.accept(new ArrayList<>(items));
         return;
      }
      for (int i = k; i < items.size(); i++) {
         java.util.Collections.swap(items, k, i);
         permute(items, k + 1, each);
         java.util.Collections.swap(items, k, i);
      }
   }
}
